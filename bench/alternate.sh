#!/usr/bin/env bash
# Compare two checkouts with bench/throughput.py, alternating them so that the machine's drift hits both alike.
#
#   git worktree add /tmp/before HEAD~1
#   bench/alternate.sh /tmp/before . 3 --only aggregate
#
# Runs each side N times (old, new, old, new, ...) with --repeats 1 and prints the turns/s and CPU-per-turn lines,
# prefixed "old" or "new". PYTHON chooses the interpreter (default: .venv/bin/python of this checkout).
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
for _ in $(seq "$runs"); do
    for side in old new; do
        dir=$old
        [ "$side" = new ] && dir=$new
        (cd "$dir" && "$python" bench/throughput.py "$@" --repeats 1 2>&1) |
            grep -E "turns/s:|CPU per turn:" | grep -v committed |
            sed -e 's/ (echo.*//' -e 's/ (50 ms.*//' -e 's/ (agent pool.*//' -e 's/ (user.*//' -e "s/^/$side /"
    done
done
