"""``make matrix``: run the fault matrix and print it (rows x faults, each cell's verdict and
seconds), on both backends; write it to ``out/matrix.md``.

::

    python -m tools.matrix.run                           # every cell, both backends
    python -m tools.matrix.run --kinds mutex --backend moto
    python -m tools.matrix.run --slice 8 --seed 7        # a seeded slice (what CI runs)
    python -m tools.matrix.run --negative-control        # the locks off: must FAIL
    python -m tools.matrix.run --backend moto --shard 1/2 --resume out/m.moto   # half, the rest of a run

``--shard I/N`` runs every N-th cell of the shuffled matrix from the I-th (N processes use N
cores: one process's threads share one interpreter lock); ``--resume LOG`` leaves out the cells a
``--log`` file already holds with a verdict other than a violation (a run cut short, finished;
its violated cells run again).

Cells on distinct keys run side by side in one runtime (``--workers``). The two redrive
readings (whether a redriven Parallel's ``Arguments`` are evaluated again: undocumented) are a
runtime-wide option, so the cells of the ``redrive-reeval`` column run in a phase of their own.
Exit status 1 when a cell found a violation.
"""

from __future__ import annotations

import argparse
import json
import random
import threading
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Iterable

from tools.matrix import rows as matrix_rows
from tools.matrix import table
from tools.matrix.rows import Row
from tools.matrix.table import COLUMNS, Column

READINGS = {"strict": False, "reevaluate": True}


def all_rows(template: dict) -> list[Row]:
    """Every row: the states of every kind's definition, the clients' and the janitor's calls."""
    from tools.matrix.stack import MACHINES

    definitions = matrix_rows.definitions(template, MACHINES)
    states = [row for kind, definition in definitions.items() for row in matrix_rows.task_rows(kind, definition)]
    return states + list(matrix_rows.CLIENT_CALLS) + list(matrix_rows.JANITOR_CALLS)


def seeded_slice(cells: list[tuple[Row, Column]], size: int, seed: int) -> list[tuple[Row, Column]]:
    """``size`` cells drawn by ``seed``, no two of one row."""
    rng = random.Random(seed)
    shuffled = cells[:]
    rng.shuffle(shuffled)
    chosen, rows = [], set()
    for row, column in shuffled:
        if row not in rows:
            chosen.append((row, column))
            rows.add(row)
        if len(chosen) == size:
            break
    return chosen


def shard(cells: list, spec: str) -> list:
    """The cells of shard ``I/N`` (1-based): every ``N``-th from the ``I``-th."""
    index, _, count = spec.partition("/")
    if not (index.isdigit() and count.isdigit() and 1 <= int(index) <= int(count)):
        raise SystemExit(f"`--shard` must be I/N with 1 <= I <= N, got: {spec!r}")
    return cells[int(index) - 1::int(count)]


def unsettled(cells: list[tuple[Row, Column]], log: Path) -> list[tuple[Row, Column]]:
    """``cells`` but those ``log`` (a ``--log`` file) holds with a verdict other than a violation."""
    done = set()
    for line in log.read_text().splitlines() if log.exists() else []:
        record = json.loads(line)
        if not record["verdict"].startswith("VIOLATED"):
            done.add((record["kind"], record["state"], record["service"], record["operation"], record["column"]))
    return [(row, column) for row, column in cells
            if (row.kind, row.state, row.service, row.operation, column.name) not in done]


def run_cells(cloud: Any, app: Any, cells: Iterable[tuple[Row, Column]], *, seed: int, workers: int = 6,
              lock_off: bool = False, progress: bool = False, prefix: str = "X", log: Path | None = None,
              situations: list[str] | None = None, witness: bool = False) -> list:
    """Run ``cells`` (each on keys of its own), ``workers`` at a time, one redrive reading at a
    time; the :class:`~tools.matrix.cells.CellResult` of each, in order. ``situations``: one
    per cell, in place of its row's (trying how to reach a row). ``witness``: no fault, the
    row's calls only counted (:func:`reachability`)."""
    from locked_workflow.testing.faults import fault_registry
    from tools.matrix.cells import Cell

    cells = list(cells)
    results: list = [None] * len(cells)
    run_id = f"{prefix}{random.Random(seed).randrange(36**4):04x}"
    saved = cloud.redrive_options.reevaluates_arguments
    log_guard = threading.Lock()
    try:
        with fault_registry() as registry:
            for reading, reevaluate in READINGS.items():
                indexes = [i for i, (_, column) in enumerate(cells) if column.reading == reading]
                if not indexes:
                    continue
                cloud.redrive_options.reevaluates_arguments = reevaluate

                def one(index: int) -> None:
                    row, column = cells[index]
                    cell = Cell(cloud, app, registry, row, column, f"{run_id}c{index:04d}", seed=seed * 100_003 + index,
                                lock_off=lock_off, situation_override=situations[index] if situations else "",
                                witness=witness)
                    results[index] = cell.run()
                    if progress:
                        print(f"  {results[index].describe()}", file=sys.stderr, flush=True)
                    if log is not None:
                        with log_guard, log.open("a") as out:
                            out.write(json.dumps(_record(results[index])) + "\n")

                with ThreadPoolExecutor(max_workers=workers) as pool:
                    for future in [pool.submit(one, i) for i in indexes]:
                        future.result()
    finally:
        cloud.redrive_options.reevaluates_arguments = saved
    return results


def _record(result: Any) -> dict:
    """A cell's result as a line of the ``--log`` file (what ``--render`` reads back)."""
    return {"kind": result.row.kind, "state": result.row.state, "service": result.row.service,
            "operation": result.row.operation, "callback": result.row.callback, "column": result.column.name,
            "situation": result.situation, "verdict": result.verdict, "seconds": round(result.seconds, 1),
            "injected": result.injected,
            "violations": {k: v for k, v in result.violations.items() if v}, "describe": result.describe(),
            "trails": [f"{p.role}: {p.status} {p.error or ''}: " + " | ".join(p.trail) for p in result.participants]}


def render_log(path: Path, title: str) -> str:
    """The matrix of the cells a ``--log`` file holds (a run that is still going, or was cut short)."""
    from types import SimpleNamespace

    results = []
    for line in path.read_text().splitlines():
        record = json.loads(line)
        row = Row(record["kind"], record["state"], record["service"], record["operation"], record["callback"])
        results.append(SimpleNamespace(row=row, column=table.COLUMN[record["column"]], verdict=record["verdict"],
                                       seconds=record["seconds"], describe=lambda text=record["describe"]: text))
    return render(results, title)


def render(results: list, title: str, rows: list | None = None) -> str:
    """The matrix as a Markdown table: a line per row, a column per fault; each cell its
    verdict and seconds (``n/a`` where the fault does not apply, blank where it was not run);
    a row no cell can reach (of ``rows``, the rows asked for) says why instead."""
    by_cell = {(r.row, r.column.name): r for r in results}
    unreachable = [row for row in rows or [] if table.unreachable(row)]
    rows = list(dict.fromkeys(r.row for r in results))
    mark = {"ok": "ok", "not reached": "n/r", "VIOLATED": "**FAIL**", "VIOLATED*": "**FAIL***"}
    lines = [f"### {title}", "", "| row | " + " | ".join(c.name for c in COLUMNS) + " |",
             "|---|" + "---|" * len(COLUMNS)]
    for row in rows:
        cells = []
        for column in COLUMNS:
            result = by_cell.get((row, column.name))
            if result is None:
                cells.append("n/a" if table.not_applicable(row, column) else "")
            else:
                cells.append(f"{mark[result.verdict]} {result.seconds:.0f}s")
        lines.append(f"| {row.name} | " + " | ".join(cells) + " |")
    for row in unreachable:
        lines.append(f"| {row.name} | " + " | ".join([f"unreachable ({table.unreachable(row)})"] * len(COLUMNS)) + " |")
    verdicts = [r.verdict for r in results]
    lines += ["", f"cells: {len(results)}; ok {verdicts.count('ok')}, not reached {verdicts.count('not reached')}, "
                  f"violated {sum(v.startswith('VIOLATED') for v in verdicts)} "
                  "(n/r: the scenario never made the row's call, so no fault was injected; FAIL*: a violation "
                  "without the fault)"]
    if unreachable:
        lines += ["", f"unreachable rows: {len(unreachable)} (no cell is run):"] + [
            f"- {key}: {why}" for key, why in table.UNREACHABLE_WHY.items()
            if any(table.unreachable(row) == key for row in unreachable)]
    violated = [r for r in results if r.verdict.startswith("VIOLATED")]
    if violated:
        lines += ["", "Violations:", "", "```"] + [r.describe() for r in violated] + ["```"]
    return "\n".join(lines)


def reachability(cloud: Any, app: Any, rows: list[Row], *, seed: int, workers: int = 2, log: Path | None = None,
                 situation: str = "", repeat: int = 1) -> dict[Row, list]:
    """Each row's situation run without a fault (``repeat`` times), its row's calls only
    counted: the cells whose verdict would be ``n/r`` in every column, known in one cheap cell
    per row (``--reach``). ``situation``: tried in place of each row's."""
    cells = [(row, COLUMN_FOR_REACH) for row in rows for _ in range(repeat)]
    results = run_cells(cloud, app, cells, seed=seed, workers=workers, progress=True, prefix="R", log=log,
                        situations=[situation] * len(cells) if situation else None, witness=True)
    found: dict[Row, list] = {}
    for result in results:
        found.setdefault(result.row, []).append(result)
    return found


#: The column a reachability cell is run under (only its reading matters: no fault is placed).
COLUMN_FOR_REACH = table.COLUMN["5xx"]


def render_reach(found: dict[Row, list], title: str) -> str:
    """A line per row: reached (its call made, how many times) or not, and any violation."""
    lines = [f"### {title}", "", "| row | situation | reached | calls | violations |", "|---|---|---|---|---|"]
    for row, results in found.items():
        calls = [r.injected for r in results]
        bad = sum(bool(any(r.violations.values())) for r in results)
        lines.append(f"| {row.name} | {results[0].situation} | {sum(c > 0 for c in calls)}/{len(calls)} | "
                     f"{','.join(map(str, calls))} | {bad or ''} |")
    reached = sum(any(r.injected for r in results) for results in found.values())
    lines += ["", f"rows: {len(found)}; reached {reached}, never reached {len(found) - reached}"]
    lines += [r.describe() for results in found.values() for r in results if any(r.violations.values())]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=["moto", "dynamodb-local", "both"], default="both")
    parser.add_argument("--kinds", default="", help="comma-separated row kinds (default: all)")
    parser.add_argument("--columns", default="", help="comma-separated fault columns (default: all)")
    parser.add_argument("--rows", default="", help="comma-separated rows, e.g. shared:Lock.Claim (default: all)")
    parser.add_argument("--slice", type=int, default=0, help="run only this many cells, drawn by --seed")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--shard", default="", help="I/N: every N-th cell from the I-th (1-based), of the shuffled cells")
    parser.add_argument("--resume", default="", help="leave out the cells this --log file holds, but violated ones")
    parser.add_argument("--workers", type=int, default=6)
    parser.add_argument("--negative-control", action="store_true", help="the workflows unlocked: must FAIL")
    parser.add_argument("--out", default="out/matrix.md")
    parser.add_argument("--log", default="", help="append each cell's result to this JSON-lines file as it ends")
    parser.add_argument("--render", default="", help="print the matrix of a --log file and exit")
    parser.add_argument("--reach", action="store_true",
                        help="run each row's situation once without a fault: is its call made (n/r known in advance)")
    parser.add_argument("--situation", default="", help="with --reach: try this situation in place of each row's")
    parser.add_argument("--repeat", type=int, default=1, help="with --reach: cells per row")
    args = parser.parse_args(argv)
    if args.render:
        print(render_log(Path(args.render), f"cells of {args.render}"))
        return 0

    from locked_workflow.testing import LocalCloud
    from locked_workflow.testing.synth import synth_app
    from tools.matrix.stack import build_stack

    synthesized = synth_app(lambda app: build_stack(app, "Matrix"))
    rows = all_rows(synthesized.template)
    if args.kinds:
        rows = [row for row in rows if row.kind in args.kinds.split(",")]
    if args.rows:
        rows = [row for row in rows if row.name in args.rows.split(",")]
    rows = [row for row in rows if not table.unreachable(row)] if args.reach else rows
    if args.reach:
        backends = ["moto", "dynamodb-local"] if args.backend == "both" else [args.backend]
        out = []
        for backend in backends:
            with LocalCloud(backend) as cloud:
                app = cloud.deploy(synthesized.template, assets_dir=synthesized.assets_dir)
                started = time.time()
                log = Path(f"{args.log}.{backend}") if args.log else None
                found = reachability(cloud, app, rows, seed=args.seed, workers=args.workers, log=log,
                                     situation=args.situation, repeat=args.repeat)
                out.append(render_reach(found, f"reachability, {backend}: {len(rows)} rows, seed {args.seed}, "
                                               f"{time.time() - started:.0f} s on {args.workers} workers"))
                print(out[-1], flush=True)
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text("\n\n".join(out) + "\n")
        return 0
    cells = table.cells(rows)
    if args.columns:
        cells = [(row, column) for row, column in cells if column.name in args.columns.split(",")]
    if args.slice:
        cells = seeded_slice(cells, args.slice, args.seed)
    else:  # every kind early on: a run cut short still shows all of them
        random.Random(args.seed).shuffle(cells)
    if args.shard:
        cells = shard(cells, args.shard)
    if args.resume:
        cells = unsettled(cells, Path(args.resume))
    print(f"MATRIX_SEED={args.seed}: {len(cells)} cells of {len(rows)} rows", flush=True)
    backends = ["moto", "dynamodb-local"] if args.backend == "both" else [args.backend]
    failed, out = False, []
    for backend in backends:
        with LocalCloud(backend) as cloud:
            app = cloud.deploy(synthesized.template, assets_dir=synthesized.assets_dir)
            started = time.time()
            log = Path(f"{args.log}.{backend}") if args.log else None
            results = run_cells(cloud, app, cells, seed=args.seed, workers=args.workers,
                                lock_off=args.negative_control, progress=True, log=log)
            text = render(results, f"{backend}: {len(cells)} cells, seed {args.seed}, {time.time() - started:.0f} s "
                                   f"on {args.workers} workers", rows)
            print(text, flush=True)
            out.append(text)
            failed |= any(r.verdict.startswith("VIOLATED") for r in results)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n\n".join(out) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
