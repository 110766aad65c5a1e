"""`megalab plan` and `megalab presets`: what theory says about a configuration before anything
runs."""

from __future__ import annotations

from megalab.commands.shared import EXIT_OK, BadArgument, validated_config, to_json, table


def cmd_plan(ns) -> int:
    from megalab import theory

    if ns.search:
        return _search(ns)
    if ns.top is not None:
        raise BadArgument(
            f"--top {ns.top} ranks the layouts of --search: add --search, or drop --top"
        )
    cfg = validated_config(ns)
    plan = theory.plan(cfg, ns.gpu)
    print(to_json(plan) if ns.json else f"{cfg.label}  (on {ns.gpu})\n{table(plan)}")
    return EXIT_OK


def _search(ns) -> int:
    """plan --search: the model's layouts on --gpus, fastest first; a layout flag given pins its
    axis."""
    from megalab.predict import calibration, search
    from megalab.runs.flags import config_from_args

    cfg = config_from_args(ns)  # its layout is not validated: the search tries every layout
    pinned = {
        axis: getattr(ns, axis) for axis in search.VARIES if getattr(ns, axis, None) is not None
    }
    found = search.search(
        cfg, cfg.gpus, gpu=ns.gpu, top=ns.top or 10, model=calibration.for_search(ns.gpu), **pinned
    )
    if ns.json:
        print(to_json({"summary": found.summary(), "candidates": found.frame().to_dict("records")}))
    else:
        print(found.table())
    return EXIT_OK


def cmd_presets(ns) -> int:
    from megalab import theory
    from megalab.runs import presets

    rows = []
    for name in presets.names():
        cfg = presets.get(name)
        rows.append(
            {
                "preset": name,
                "params": theory.params(cfg)["total"],
                "layers": cfg.layers,
                "hidden": cfg.hidden,
                "heads": cfg.heads,
                "seq": cfg.seq,
                "experts": cfg.experts,
                "source": presets.source(name),
            }
        )
    if ns.json:
        print(to_json(rows))
        return EXIT_OK
    head = f"{'preset':<14}{'params':>9}{'layers':>7}{'hidden':>7}{'heads':>6}{'seq':>6}"
    print(f"{head}{'experts':>8}  source")
    for r in rows:
        print(
            f"{r['preset']:<14}{_si(r['params']):>9}{r['layers']:>7}{r['hidden']:>7}{r['heads']:>6}{r['seq']:>6}"
            f"{r['experts']:>8}  {r['source']}"
        )
    return EXIT_OK


def _si(n: float) -> str:
    for unit, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.3g}{unit}"
    return str(n)
