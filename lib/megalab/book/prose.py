"""The numbers the prose says, shown the same in JupyterLab and in the HTML book.

    from megalab.book.prose import say
    say("att_2k", float(share), ".0%")      # in a code cell
    Attention is {eval}`att_2k` of the FLOPs at 2k tokens.   # in the markdown below it

`say(name, value, fmt)` keeps `Said(value, fmt)`, whose text is `format(value, fmt)`, twice:
- as a variable `name` of the kernel: in JupyterLab, jupyterlab-myst evaluates the inline
`{eval}`name``
  role in the kernel when its markdown cell runs and shows that text. So the prose reads names said by a
  cell above it (a name said further down shows a NameError until its cell ran and the markdown runs
  again): the book's build warns on such a read (`read_before_said`), an error under -W;
- as myst-nb glue data of the executed notebook: in the HTML book, the `eval` role of this module
(the
  megalab.book.reproduce Sphinx extension registers it in place of myst-nb's, which needs inline
  execution) pastes that text, exactly as `{glue:text}`name:fmt`` would.

`fmt` is a format spec as `{glue:text}` takes it (".1f", ".0%", ",.0f"); the value is coerced by the
spec's type as myst-nb's `format_plain_text` does, so a chapter converted from `{glue:text}`
(tools/glue_to_eval.py) renders the same text. A name must not overwrite a variable of the notebook
or a builtin: say it under another name.
"""

from __future__ import annotations

import builtins
import keyword
import re

QUOTED = re.compile(r"^([\"'])(.*)\1$")  # jupyterlab-myst shows a str's repr without its quotes


class ProseNameTaken(ValueError):
    """`say(name, ...)` would overwrite a variable of the notebook (or a builtin) that is not a said
    value."""


class Said:
    """A value as the prose says it: `str()`, `repr()` and the text/plain display are `format(value,
    fmt)`."""

    __slots__ = ("value", "fmt")

    def __init__(self, value, fmt: str = ""):
        self.value = value
        self.fmt = fmt
        str(self)  # a spec that does not fit the value fails here, in the cell that says it

    def __str__(self) -> str:
        return format(_coerce(self.value, self.fmt), self.fmt)

    __repr__ = __str__

    def _repr_pretty_(self, printer, cycle) -> None:  # IPython's text/plain
        printer.text(str(self))

    def __format__(self, spec: str) -> str:
        return format(self.value, spec) if spec else str(self)

    def __eq__(self, other) -> bool:
        return isinstance(other, Said) and (self.value, self.fmt) == (other.value, other.fmt)

    __hash__ = None


def _coerce(value, spec: str):
    """The value as myst-nb's `{glue:text}` formats it: by the spec's type character."""
    kind = spec[-1:] if spec else ""
    if kind == "s":
        return str(value)
    if kind in ("b", "c", "d", "o", "x", "X"):
        return int(value)
    if kind in ("e", "E", "f", "F", "g", "G", "n", "%"):
        return float(value)
    return value


def check_name(name: str, namespace: dict | None = None) -> None:
    """Raise unless `name` can be a said variable: an identifier, not a keyword or a builtin, and
    not a variable of `namespace` already holding something other than a said value."""
    if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name):
        raise ValueError(
            f"say({name!r}, ...): the name must be a Python identifier, as {{eval}} reads it"
        )
    if hasattr(builtins, name):
        raise ProseNameTaken(
            f"say({name!r}, ...) would hide the builtin {name}: say it under another name"
        )
    if namespace is not None and name in namespace and not isinstance(namespace[name], Said):
        raise ProseNameTaken(
            f"say({name!r}, ...) would overwrite the notebook's variable {name}: say it under "
            f"another name (and read that name in the prose)"
        )


def say(name: str, value, fmt: str = "") -> None:
    """Make `{eval}`name`` in the prose show `format(value, fmt)`, in JupyterLab and in the HTML
    book."""
    from IPython import get_ipython

    shell = get_ipython()
    namespace = shell.user_ns if shell is not None else None
    check_name(name, namespace)
    said = Said(value, fmt)
    from myst_nb import glue

    glue(name, said, display=False)
    if namespace is not None:
        namespace[name] = said


def shown_text(plain: str) -> str:
    """A text/plain display as an inline {eval} shows it: a quoted string without its quotes."""
    return QUOTED.sub(r"\2", plain)


# -- Sphinx: the `eval` role of the HTML book ------------------------------------------------------
def eval_role():
    """myst-nb's `eval` role needs a kernel (inline execution); the book renders executed copies, so
    this one pastes the text/plain of the glue data said under the role's name."""
    from docutils import nodes
    from myst_nb.core.variables import RetrievalError
    from myst_nb.ext.glue.utils import glue_warning, retrieve_glue_data
    from myst_nb.ext.utils import RoleBase

    class EvalSaid(RoleBase):
        def run(self):
            name = self.text.strip()
            if not name.isidentifier():
                return [], [
                    glue_warning(
                        f"{{eval}}`{name}`: the book pastes a name said with "
                        f"megalab.book.prose.say(), not an expression",
                        self.document,
                        self.line,
                    )
                ]
            try:
                data = retrieve_glue_data(self.document, name)
            except RetrievalError:
                return [], [
                    glue_warning(
                        f"{{eval}}`{name}`: no say({name!r}, ...) in this notebook",
                        self.document,
                        self.line,
                    )
                ]
            if "text/plain" not in data.data:
                return [], [
                    glue_warning(
                        f"{{eval}}`{name}`: its glue data has no text/plain",
                        self.document,
                        self.line,
                    )
                ]
            text = shown_text(data.data["text/plain"])
            node = nodes.inline(text, text, classes=["pasted-text"])
            self.set_source_info(node)
            return [node], []

    return EvalSaid()


def setup_sphinx(app) -> None:
    """Register the `eval` role (called from megalab.book.reproduce.setup, after myst-nb's own)."""
    app.add_role("eval", eval_role(), override=True)


# -- which names a notebook's prose reads, and where they are said ---------------------------------
EVAL_ROLE = re.compile(r"\{eval\}`([^`]+)`")


def reads(nb: dict) -> dict[str, int]:
    """Each name an `{eval}` role of the notebook's markdown reads -> the index of the first cell
    reading it."""
    out: dict[str, int] = {}
    for i, cell in enumerate(nb.get("cells", [])):
        if cell.get("cell_type") == "markdown":
            for m in EVAL_ROLE.finditer(_text(cell.get("source", ""))):
                out.setdefault(m.group(1).strip(), i)
    return out


def said(nb: dict) -> dict[str, int]:
    """Each name an executed notebook said (its glue outputs) -> the index of the first cell saying
    it."""
    out: dict[str, int] = {}
    for i, cell in enumerate(nb.get("cells", [])):
        for output in cell.get("outputs", []):
            name = output.get("metadata", {}).get("scrapbook", {}).get("name")
            if name is not None:
                out.setdefault(name, i)
    return out


def read_before_said(nb: dict) -> list[tuple[str, int, int | None]]:
    """(name, reading cell, saying cell or None) for each name the prose of an executed notebook
    reads before a cell says it: in JupyterLab these show an error until the markdown cell runs
    again."""
    where = said(nb)
    return [
        (name, i, where.get(name))
        for name, i in reads(nb).items()
        if where.get(name, len(nb["cells"])) > i
    ]


def _text(source) -> str:
    return source if isinstance(source, str) else "".join(source)
