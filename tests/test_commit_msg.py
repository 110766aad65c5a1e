"""tools/commit-msg, the commit-message hook: a subject of at most 72 characters, a blank line
before the body."""

import subprocess
import sys
from pathlib import Path

import pytest

HOOK = Path(__file__).resolve().parents[1] / "tools" / "commit-msg"


def _check(tmp_path, message: str) -> subprocess.CompletedProcess:
    path = tmp_path / "COMMIT_EDITMSG"
    path.write_text(message, encoding="utf-8")
    return subprocess.run([sys.executable, str(HOOK), str(path)], capture_output=True, text=True)


@pytest.mark.parametrize(
    "message",
    [
        "Wiring reads the parallel sizes from runs.axes.AXES\n",
        "A subject\n\nA body that explains why,\nover two lines.\n",
        "x" * 72 + "\n\nbody\n",
        "PP 2 × VPP 2: " + "é" * 58 + "\n",  # characters, not bytes
        # git's comments are not the message
        "A subject\n# Please enter the commit message ...\n\nbody\n",
        "A subject\n\nbody\n# ------------------------ >8 ------------------------\n"
        + "y" * 100
        + "\n",
        "\n\n",  # empty: git itself refuses it
    ],
)
def test_a_good_message_passes(tmp_path, message):
    done = _check(tmp_path, message)
    assert done.returncode == 0 and done.stderr == ""


@pytest.mark.parametrize(
    "message, why",
    [
        ("x" * 73 + "\n", "the subject is 73 characters; keep it to 72"),
        ("A subject\nbody right below it\n", "leave a blank line between the subject and the body"),
    ],
)
def test_a_bad_message_is_refused_with_what_to_change(tmp_path, message, why):
    done = _check(tmp_path, message)
    assert done.returncode == 1 and done.stderr.startswith("commit-msg: ") and why in done.stderr


def test_installed_as_the_readme_says_it_refuses_a_commit(tmp_path):
    """`ln -s ../../tools/commit-msg .git/hooks/commit-msg` in a clone: git runs it on every
    commit."""
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q"], check=True)
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "commit-msg").write_bytes(HOOK.read_bytes())
    (tmp_path / "tools" / "commit-msg").chmod(0o755)
    (tmp_path / ".git" / "hooks" / "commit-msg").symlink_to("../../tools/commit-msg")
    refused = subprocess.run(
        [*git, "commit", "-q", "--allow-empty", "-m", "y" * 80], capture_output=True, text=True
    )
    assert refused.returncode != 0 and "keep it to 72" in refused.stderr
    subprocess.run(
        [*git, "commit", "-q", "--allow-empty", "-m", "A subject", "-m", "A body."], check=True
    )
