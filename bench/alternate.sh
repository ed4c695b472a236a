#!/usr/bin/env bash
# Compare two checkouts with bench/throughput.py, alternating them so that the machine's drift hits both alike.
#
#   git archive <commit before the change> | tar -x -C /tmp/before
#   bench/alternate.sh /tmp/before . 5 --only aggregate
#   bench/alternate.sh /tmp/before . 1 --only aggregate --trace    # statements per turn (the tracer costs CPU)
#
# Runs each side N times (old, new, new, old, old, new, ...) with --repeats 1. Both sides run THIS checkout's
# bench/throughput.py (HERMES_BENCH_CODE points it at the side's package), so they are measured the same way.
# Prints every figure line of every run prefixed "old" or "new", then per figure the median and min-max of each
# side and the ratio of the medians (new / old), over the figures both sides printed. PYTHON chooses the
# interpreter (default: .venv/bin/python of this checkout); LOG, when set, keeps the raw lines in that file.
set -euo pipefail
if [ $# -lt 3 ]; then
    echo "usage: $0 OLD_CHECKOUT NEW_CHECKOUT RUNS [throughput.py options...]" >&2
    exit 2
fi
here=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-$here/.venv/bin/python}
old=$(cd "$1" && pwd)
new=$(cd "$2" && pwd)
runs=$3
shift 3
log=${LOG:-$(mktemp)}
: >"$log"
# The pairs alternate their order too (old new, new old, ...): run second in a pair, either side measured 7-10 %
# more CPU per turn than first on this machine (2026-12-06, the same two trees swapped), whatever the code.
for run in $(seq "$runs"); do
    sides="old new"
    [ $((run % 2)) -eq 0 ] && sides="new old"
    for side in $sides; do
        dir=$old
        [ "$side" = new ] && dir=$new
        (cd "$dir" && HERMES_BENCH_CODE="$dir" "$python" "$here/bench/throughput.py" "$@" --repeats 1 2>&1) |
            grep -E "^[a-zA-Z0-9/ ,._%-]+: -?[0-9]" | grep -v "^total runtime" | sed -e "s/^/$side /" | tee -a "$log"
    done
done
"$python" - "$log" <<'EOF'
import re
import statistics
import sys

line = re.compile(r"^(old|new) (.+?): (-?[0-9.]+)")
values: dict[str, dict[str, list[float]]] = {}
order: list[str] = []
for text in open(sys.argv[1], encoding="utf-8"):
    match = line.match(text)
    if match is None:
        continue
    side, name, value = match.group(1), match.group(2), float(match.group(3))
    if name not in values:
        values[name] = {"old": [], "new": []}
        order.append(name)
    values[name][side].append(value)


def shown(x: float) -> str:
    return f"{x:.0f}" if abs(x) >= 100 else f"{x:.3g}"


print()
print("| figure | old median (min-max) | new median (min-max) | new / old |")
print("|---|---|---|---|")
for name in order:
    old, new = values[name]["old"], values[name]["new"]
    if not old or not new:
        continue
    o, n = statistics.median(old), statistics.median(new)
    ratio = f"{n / o:.3g}" if o else "-"
    print(
        f"| {name} | {shown(o)} ({shown(min(old))}-{shown(max(old))}) | "
        f"{shown(n)} ({shown(min(new))}-{shown(max(new))}) | {ratio} |"
    )
print(f"\n{len(values[order[0]]['old']) if order else 0} runs a side")
EOF
