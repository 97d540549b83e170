#!/usr/bin/env bash
# Run each cargo-fuzz target of fuzz/ for a time budget and print, per target,
# the executions libFuzzer ran, the coverage it reached (edges, features) and the
# crashes it found (new files in fuzz/artifacts/<target>/: crash-*, oom-*,
# timeout-*, leak-*).
# Usage: scripts/fuzz.sh [SECONDS] [TARGET...]   (default 600 s per target, every target)
# Exits 1 if any target crashed, printing the artifact paths; 2 on setup errors.
# Builds into $CARGO_TARGET_DIR (default /work/target-fuzz). New corpus entries go to
# $CARGO_TARGET_DIR/corpus/<target>/; the committed seeds in fuzz/corpus/<target>/ are
# read only. Reproduce a crash: cargo +nightly fuzz run <target> <artifact>
# Minimise it:                  cargo +nightly fuzz tmin <target> <artifact>
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$(pwd)
secs=${1:-600}
shift || true
[[ "$secs" =~ ^[0-9]+$ ]] || { echo "fuzz.sh: SECONDS must be a whole number, got '$secs'" >&2; exit 2; }

export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/work/target-fuzz}
toolchain=${FUZZ_TOOLCHAIN:-nightly}

rustup run "$toolchain" rustc --version >/dev/null 2>&1 \
    || { echo "fuzz.sh: no $toolchain toolchain (rustup toolchain install $toolchain)" >&2; exit 2; }
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz.sh: installing cargo-fuzz" >&2
    cargo install --locked cargo-fuzz || { echo "fuzz.sh: cargo install cargo-fuzz failed" >&2; exit 2; }
fi

cd "$root/fuzz"
if (($# > 0)); then
    targets=("$@")
else
    mapfile -t targets < <(cargo +"$toolchain" fuzz list)
fi
((${#targets[@]} > 0)) || { echo "fuzz.sh: no fuzz targets" >&2; exit 2; }

echo "fuzz.sh: building ${#targets[@]} target(s)" >&2
cargo +"$toolchain" fuzz build >&2 || { echo "fuzz.sh: build failed" >&2; exit 2; }

logs="$CARGO_TARGET_DIR/fuzz-logs"
mkdir -p "$logs"
crashed=()
rows=()
for t in "${targets[@]}"; do
    art="$root/fuzz/artifacts/$t"
    scratch="$CARGO_TARGET_DIR/corpus/$t"
    seeds="$root/fuzz/corpus/$t"
    mkdir -p "$art" "$scratch" "$seeds"
    before=$(mktemp)
    (cd "$art" && ls -1) | sort >"$before"
    log="$logs/$t.log"
    echo "fuzz.sh: $t for ${secs}s (log $log)" >&2
    # First corpus dir is the writable one.
    cargo +"$toolchain" fuzz run "$t" "$scratch" "$seeds" -- \
        -max_total_time="$secs" -print_final_stats=1 -timeout=20 >"$log" 2>&1
    rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n1)
    cov=$(grep -oE 'cov: [0-9]+ ft: [0-9]+' "$log" | tail -n1 | awk '{ print $2 "/" $4 }')
    new=$(comm -13 "$before" <((cd "$art" && ls -1) | sort))
    rm -f "$before"
    n=0
    if [[ -n "$new" ]]; then
        n=$(printf '%s\n' "$new" | wc -l)
        while IFS= read -r f; do crashed+=("$art/$f"); done <<<"$new"
    elif ((rc != 0)); then
        # Failed without leaving an artifact (build or harness error): count it, show the log.
        n=1
        crashed+=("(no artifact; exit $rc, see $log)")
    fi
    rows+=("$(printf '%-16s %6ss %14s %13s %8s' "$t" "$secs" "${execs:-?}" "${cov:-?}" "$n")")
done

printf '\n%-16s %7s %14s %13s %8s\n' target seconds executions cov/features crashes
printf '%s\n' "${rows[@]}"
if ((${#crashed[@]} > 0)); then
    printf '\nfuzz.sh: crashes:\n' >&2
    printf '  %s\n' "${crashed[@]}" >&2
    exit 1
fi
