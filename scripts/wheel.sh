#!/usr/bin/env bash
# Build the noa wheel (maturin, bindings = "bin") into target/wheels/ and smoke-test it in a
# fresh virtualenv: `noa --version` and a dry-run `noa project` on the bundled Claude Code sample.
# Usage: scripts/wheel.sh   (any cwd; honours CARGO_TARGET_DIR; needs python3 and cargo)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$(pwd)

tmp=$(mktemp -d "${TMPDIR:-/tmp}/noa-wheel.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

die() { echo "wheel.sh: $*" >&2; exit 1; }

version=$(sed -n '/^\[package\]/,/^\[/{s/^version *= *"\([^"]*\)".*/\1/p}' Cargo.toml | head -n1)
[[ -n "$version" ]] || die "no [package] version in Cargo.toml"

# 1. maturin: the one on PATH, else a throwaway virtualenv.
if command -v maturin >/dev/null 2>&1; then
    maturin=$(command -v maturin)
else
    echo "wheel.sh: maturin not on PATH; installing it into $tmp/build-venv" >&2
    python3 -m venv "$tmp/build-venv"
    "$tmp/build-venv/bin/python" -m pip install --quiet --disable-pip-version-check "maturin>=1.5,<2"
    maturin="$tmp/build-venv/bin/maturin"
fi
"$maturin" --version

# 2. Build. --out pins the output dir whatever CARGO_TARGET_DIR says. On x86-64 Linux the
# binary is linked statically: an agent loop starts it every turn, and a static binary loads
# no shared libraries (figures in docs/benchmarks.md). The flag needs the target named, or
# cargo applies it to proc-macros too.
out="$root/target/wheels"
mkdir -p "$out"
rm -f "$out"/noa_context-"$version"-*.whl
if [[ "$(uname -s)-$(uname -m)" == Linux-x86_64 ]] && ldd --version 2>&1 | grep -qi 'gnu\|glibc'; then
    RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static" \
        "$maturin" build --release --target x86_64-unknown-linux-gnu --out "$out"
else
    "$maturin" build --release --out "$out"
fi
shopt -s nullglob
wheels=("$out"/noa_context-"$version"-*.whl)
shopt -u nullglob
[[ ${#wheels[@]} -eq 1 ]] || die "expected one noa_context-$version wheel in $out, found ${#wheels[@]}"
wheel=${wheels[0]}

# 3. Install into a fresh virtualenv, no index: the wheel has no dependencies.
python3 -m venv "$tmp/test-venv"
"$tmp/test-venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-index "$wheel"
noa="$tmp/test-venv/bin/noa"
[[ -x "$noa" ]] || die "the wheel installed no bin/noa"
# On PATH the way an activated venv has it.
export PATH="$tmp/test-venv/bin:$PATH"
[[ "$(command -v noa)" == "$noa" ]] || die "noa on PATH is $(command -v noa), not the venv's"

# 4. Smoke test.
file -L "$noa" 2>/dev/null || true
got=$(noa --version)
echo "$got"
[[ "$got" == *"$version"* ]] || die "noa --version printed '$got', expected $version"

sample=testdata/real/claude-code/short.jsonl
noa_dirs_before=$(find testdata -name .noa -type d | sort)
mkdir "$tmp/state"
noa project "$sample" --dry-run --state-dir "$tmp/state" > "$tmp/view.jsonl" 2> "$tmp/report.txt" \
    || { cat "$tmp/report.txt" >&2; die "noa project --dry-run failed"; }
cat "$tmp/report.txt"
[[ -s "$tmp/view.jsonl" ]] || die "noa project wrote an empty view"
"$tmp/test-venv/bin/python" - "$tmp/view.jsonl" <<'PY' || die "the view is not JSON lines"
import json, sys
lines = [l for l in open(sys.argv[1], encoding="utf-8") if l.strip()]
for l in lines:
    json.loads(l)
print(f"view: {len(lines)} messages, first: {lines[0][:100].rstrip()}")
PY
[[ -z "$(ls -A "$tmp/state")" ]] || die "--dry-run wrote state into --state-dir"
[[ "$(find testdata -name .noa -type d | sort)" == "$noa_dirs_before" ]] || die "a .noa dir appeared under testdata"

size=$(wc -c < "$wheel")
echo "wheel: ${wheel#"$root"/} ($size bytes, $(( (size + 1023) / 1024 )) KiB)"
echo "wheel OK"
