#!/usr/bin/env bash
# Compare two checkouts with bench/cluster.py --only cost, alternating them so that the machine's drift hits both alike
# (bench/alternate.sh does the same for bench/throughput.py).
#
#   git archive <commit before the change> | tar -x -C /tmp/before
#   git archive HEAD | tar -x -C /tmp/after
#   bench/alternate_cost.sh /tmp/before /tmp/after 3                  # both sides, 3 runs of each tree
#   bench/alternate_cost.sh /tmp/before /tmp/after 3 --sides cluster  # the cluster alone (about 75 s a run)
#
# Runs THIS checkout's bench/cluster.py --only cost --repeat 1 once per tree and run (old, new, new, old, ...), with
# HERMES_BENCH_CODE pointing at the tree, so both are measured the same way. Prints every figure line prefixed "old" or
# "new", then per figure the median and min-max of each tree and the ratio of the medians (new / old). PYTHON chooses
# the interpreter (default: .venv/bin/python of this checkout); LOG, when set, keeps the raw lines in that file.
set -euo pipefail
if [ $# -lt 3 ]; then
    echo "usage: $0 OLD_CHECKOUT NEW_CHECKOUT RUNS [bench/cluster.py --only cost options...]" >&2
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
for run in $(seq "$runs"); do
    order="old new"
    [ $((run % 2)) -eq 0 ] && order="new old"
    for tree in $order; do
        dir=$old
        [ "$tree" = new ] && dir=$new
        out=$(mktemp)
        if ! HERMES_BENCH_CODE="$dir" "$python" "$here/bench/cluster.py" --only cost --repeat 1 "$@" >"$out" 2>&1; then
            echo "run $run of the $tree tree ($dir) failed:" >&2
            tail -40 "$out" >&2
            exit 1
        fi
        grep -E "^cost_[a-z0-9_]+: -?[0-9]" "$out" | grep -Ev "_(statement|pg_statement)_[0-9]+:" |
            sed -e "s/^/$tree /" | tee -a "$log"
        rm -f "$out"
    done
done
"$python" - "$log" <<'EOF'
import re
import statistics
import sys

line = re.compile(r"^(old|new) (cost_[a-z0-9_]+): (-?[0-9.]+)")
values: dict[str, dict[str, list[float]]] = {}
for text in open(sys.argv[1], encoding="utf-8"):
    found = line.match(text)
    if found is not None:
        values.setdefault(found[2], {"old": [], "new": []})[found[1]].append(float(found[3]))


def shown(x: float) -> str:
    return f"{x:.0f}" if abs(x) >= 100 else f"{x:.3g}"


print("\n| figure | old median (min-max) | new median (min-max) | new / old |\n|---|---|---|---|")
for name, sides in values.items():
    old, new = sides["old"], sides["new"]
    if old and new:
        o, n = statistics.median(old), statistics.median(new)
        ratio = f"{n / o:.3g}" if o else "-"
        print(f"| {name} | {shown(o)} ({shown(min(old))}-{shown(max(old))}) | {shown(n)} ({shown(min(new))}-{shown(max(new))}) | {ratio} |")
EOF
