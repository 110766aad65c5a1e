"""The hardware page: the hosts and software behind the records, in words and compact tables.

    hw.probes(results)                  # {"4 × H200 host": probe, "2 × H200 host": probe}
    hw.hosts_table(hw.probes(results))  # one column per probed host, in words
    hw.environments(records.provenance(runs))  # one row per software and GPU environment
    hw.set_aside(results.errata())      # each reason records were set aside for, and how many
"""

from __future__ import annotations

__all__ = ["PROBES", "probes", "hosts_table", "environments", "same_text", "reason", "set_aside"]

# the host probes of the results store: column name -> file under the store's root
PROBES = {
    "4 × H200 host": "probes/host-4xh200/host_probe.json",
    "2 × H200 host": "probes/host-2xh200/host_probe.json",
}
# provenance columns that name one environment, and their headers
ENVIRONMENT = {
    "gpu_name": "GPU",
    "interconnect": "GPU-to-GPU link",
    "driver": "Driver",
    "cuda": "CUDA",
    "torch": "PyTorch",
    "megatron_core": "Megatron Core",
    "transformer_engine": "Transformer Engine",
    "python": "Python",
}


def probes(store=None) -> dict:
    """{column name: host probe (with its links)} of every PROBES file the store holds; a store
    holding none (a fresh one, as a GPU host's recording uses) reads the checkout's results/."""
    from megalab.book.chapters import ch00_know_your_machine as ch00

    for root in ch00.probe_roots(store):
        out = {n: ch00.host_probe(root, rel) for n, rel in PROBES.items() if (root / rel).exists()}
        if out:
            return out
    return {}


def hosts_table(hosts: dict):
    """The probed hosts side by side in words (ch00's rows: CPU, cores, VM or bare metal, GPUs,
    NCCL, links, launch costs), one column per host."""
    import pandas as pd

    from megalab.book.chapters import ch00_know_your_machine as ch00

    if not hosts:
        raise LookupError(f"no host probe in the results store ({', '.join(PROBES.values())})")
    df = pd.DataFrame({name: ch00._host_words(h) for name, h in hosts.items()})
    return ch00.shown(df.rename_axis("").reset_index())


def environments(prov):
    """records.provenance's rows merged over commits: one row per GPU and software environment,
    with records (how many), gpus (the GPU counts its runs saw, "1, 2, 4", headed "GPUs seen") and
    the first and last day (YYYY-MM-DD), oldest first; columns headed in words (ENVIRONMENT). A
    column with one value in every row is dropped and said in attrs["same"] ("Driver 580.159.04,
    CUDA 13.0")."""
    import pandas as pd

    cols = list(ENVIRONMENT)
    rows = []
    for key, part in prov.groupby(cols, sort=False):
        counts = sorted({int(n) for gpus in part["gpus"] for n in gpus})
        rows.append(
            dict(zip(cols, key))
            | {
                "records": int(part["records"].sum()),
                "gpus": ", ".join(map(str, counts)),
                "first": str(part["first"].min())[:10],
                "last": str(part["last"].max())[:10],
            }
        )
    out = pd.DataFrame(rows).sort_values("first", kind="stable").reset_index(drop=True)
    alone = (out["interconnect"] == "none") & (out["gpus"] == "1")
    out.loc[alone, "interconnect"] = "none (one GPU)"
    out["gpu_name"] = out["gpu_name"].str.replace("NVIDIA ", "", regex=False)
    same = [c for c in cols if out[c].nunique() == 1]
    out.attrs["same"] = ", ".join(f"{ENVIRONMENT[c]} {out[c].iloc[0]}" for c in same)
    return out.drop(columns=same).rename(
        columns=ENVIRONMENT
        | {"records": "Records", "gpus": "GPUs seen", "first": "First", "last": "Last"}
    )


def same_text(env, what: str, width: int = 88) -> str:
    """"Every run: Driver 580.159.04, CUDA 13.0, ...": what environments() found the same in every
    row, wrapped at `width` columns (an output line is not cut at a narrow page)."""
    import textwrap

    return textwrap.fill(f"{what}: {env.attrs['same']}.", width)


def reason(note: str) -> str:
    """An erratum's reason in one clause: its text before the first colon, parentheses dropped
    (they hold file names and commits), the first letter capitalised."""
    import re

    short = re.sub(r"\s*\([^)]*\)", "", note).split(":")[0].strip()
    return short[:1].upper() + short[1:]


def set_aside(notes: dict):
    """One row per reason in the errata (`store.errata()`: record id -> reason), in one clause
    (reason()), and how many records it sets aside, most first."""
    import pandas as pd

    counts = pd.Series([reason(n) for n in notes.values()], dtype=object).value_counts()
    return pd.DataFrame({"Why the records were set aside": counts.index, "Records": counts.values})
