#!/usr/bin/env bash
# A long life: examples/agent_loop.py drives the release binary for TURNS turns at a WINDOW-token
# window (its scripted model answers every nudge with a Compress call, so the session compresses,
# consolidates into higher tiers and truncates), every noa call timed with its peak memory.
# Prints the time and peak memory of `noa project` around turns 1, 500, 1,000, 2,000 (and the
# last), and the state dir's size with and without its archives at the end.
# Usage: scripts/soak.sh [TURNS] [WINDOW]   (default 2000 32000); needs python3 and /usr/bin/time.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
turns=${1:-2000}
window=${2:-32000}
cargo build --release --quiet
work=$(mktemp -d "${TMPDIR:-/tmp}/noa-soak.XXXXXX")
log="$work/calls.log"
# One line a noa call: wall microseconds, peak resident KB, command.
cat >"$work/noa" <<EOF
#!/bin/sh
start=\$(date +%s%N)
/usr/bin/time -o "$work/rss.\$\$" -f "%M" "$(pwd)/target/release/noa" "\$@"
rc=\$?
end=\$(date +%s%N)
echo "\$(( (end - start) / 1000 )) \$(tail -n1 "$work/rss.\$\$") \$1" >>"$log"
rm -f "$work/rss.\$\$"
exit \$rc
EOF
chmod +x "$work/noa"
python3 examples/agent_loop.py --noa "$work/noa" --turns "$turns" --limit "$window" \
    --state-dir "$work/state" --transcript "$work/session.jsonl" 2>/dev/null
echo "soak: $turns turns at $window tokens in $work"
# The project calls in order, one a turn; the median of the ten around each mark.
python3 - "$log" <<'PY'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1]) if line.rstrip().endswith(" project")]
n = len(rows)
marks = [1] + list(range(500, n + 1, 500)) + ([n] if n % 500 else [])
for k in marks:
    lo = max(0, min(k - 5, n - 10)); part = rows[lo:lo + 10]
    t = statistics.median(int(r[0]) for r in part) / 1000
    m = statistics.median(int(r[1]) for r in part) / 1024
    print(f"turn {k:5d}: project {t:5.1f} ms, peak {m:6.1f} MB (median of turns {lo + 1}-{lo + len(part)})")
PY
session=$(find "$work/state" -mindepth 1 -maxdepth 1 -type d | head -n1)
total=$(du -sk "$session" | cut -f1)
archives=$(find "$session" -path '*/tier*/*.md' -printf '%k\n' | awk '{ s += $1 } END { print s + 0 }')
count=$(find "$session" -path '*/tier*/*.md' | wc -l)
echo "state dir: ${total} KB, of which ${archives} KB in ${count} archives; the rest:"
find "$session" -maxdepth 1 -type f -printf '  %f %k KB\n' | sort
echo "transcript: $(du -k "$work/session.jsonl" | cut -f1) KB"
