#!/usr/bin/env bash
# soak.sh — run the tests that have ever flaked (scripts/soak.txt) again and
# again: go test -race -count=$SOAK_COUNT (default 3) -run <pattern> <package>
# for each line, through bin/testtimes (make testtimes builds it). Every
# line runs; the script fails if any failed, or if a line's pattern passed
# no test (a renamed test must be renamed in soak.txt too, and a skipped one
# means its engine was not selected). `make test-all` runs it with
# BERTH_TEST_ENGINES=all.
set -uo pipefail
cd "$(dirname "$0")/.."
GO="${GO:-go}"
COUNT="${SOAK_COUNT:-3}"
[[ -x bin/testtimes ]] || "$GO" build -o bin/testtimes ./internal/testtimes || exit 1
failed=()
while read -r pkg pattern _; do
	[[ -z $pkg || $pkg == \#* ]] && continue
	echo "soak: $pkg -run '$pattern' x$COUNT"
	out=$(mktemp)
	bin/testtimes "$GO" test -json -race -count="$COUNT" -timeout 60m -run "$pattern" "$pkg" | tee "$out"
	rc=${PIPESTATUS[0]}
	if ((rc != 0)); then
		failed+=("$pkg $pattern")
	elif grep -q '  0 passed' "$out"; then
		echo "soak: $pkg: -run '$pattern' passed no test (renamed, or its engine not selected? see scripts/soak.txt)"
		failed+=("$pkg $pattern (no test passed)")
	fi
	rm -f "$out"
done <scripts/soak.txt
if ((${#failed[@]})); then
	echo "soak: FAILED:"
	printf '  %s\n' "${failed[@]}"
	exit 1
fi
echo "soak: all green"
