#!/usr/bin/env bash
# The third-party SDK, end to end (ctest runs it as `sdk`):
#   1. cmake --install <build> into a scratch prefix; check the layout and
#      that the installed ft loads the installed libft_core.so;
#   2. build plugins/template OUT OF TREE against that prefix only
#      (find_package(ft)), never the source tree;
#   3. `ft strategies --verbose` names where each strategy came from
#      (built-in, --plugin-dir, FT_PLUGIN_PATH);
#   4. parity: `ft run --strategy local_sgd --nproc 2` (gradients averaged
#      every step) reproduces ../shared/fixtures/parity-tiny within 1e-4;
#   5. `ft bench` gives local_sgd a theory column from its MemoryModel, equal
#      to what each rank holds.
# Steps 4 and 5 need ../shared (or FT_SHARED_DIR); without it the script prints
# SKIPPED and exits 77, which ctest reports as a skip.
#
# Usage: scripts/test-sdk.sh [build-dir]     (default: <repo>/build, already built)
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$(cd "${1:-$repo/build}" && pwd -P)"
shared="${FT_SHARED_DIR:-$repo/../shared}"
fixture="$shared/fixtures/parity-tiny"
# A fixed place (not mktemp) so ccache hits on the template's compile line.
work="$build/sdk-test"
prefix="$work/prefix"
plugin_build="$work/template-build"

fail() { echo "test-sdk: FAIL: $*" >&2; exit 1; }
step() { echo "test-sdk: $*"; }

rm -rf "$work"
mkdir -p "$work"

step "install $build -> $prefix"
cmake --install "$build" --prefix "$prefix" >"$work/install.log" 2>&1 ||
  { cat "$work/install.log"; fail "cmake --install $build (build every target first)"; }
for f in bin/ft lib/libft_core.so lib/ft/strategies/libft_strategy_single.so include/ft/plugin/plugin.h \
         include/ft/parallel/replicated_strategy.h include/ft/comm/comm.h lib/cmake/ft/ftConfig.cmake \
         lib/cmake/ft/ftConfigVersion.cmake lib/cmake/ft/ftTargets.cmake lib/cmake/ft/FtStrategy.cmake; do
  [[ -e "$prefix/$f" ]] || fail "install is missing $prefix/$f"
done
# RUNPATH, not the build tree, must find libft_core.so.
core_used="$(env -u LD_LIBRARY_PATH ldd "$prefix/bin/ft" | awk '$1 == "libft_core.so" { print $3 }')"
[[ "$(realpath "$core_used")" == "$prefix/lib/libft_core.so" ]] ||
  fail "installed ft loads libft_core.so from '$core_used', expected $prefix/lib/libft_core.so"

step "build plugins/template against $prefix"
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S "$repo/plugins/template" -B "$plugin_build" "${generator[@]}" "${launcher[@]}" \
  -DCMAKE_PREFIX_PATH="$prefix" >"$work/template-configure.log" 2>&1 ||
  { cat "$work/template-configure.log"; fail "configuring plugins/template"; }
cmake --build "$plugin_build" >"$work/template-build.log" 2>&1 ||
  { cat "$work/template-build.log"; fail "building plugins/template"; }
plugin="$plugin_build/libft_strategy_local_sgd.so"
[[ -f "$plugin" ]] || fail "no $plugin after the build"
# Out of tree means out of tree: only the installed headers are on the include path.
if grep -q -e "$repo/core/include" -e "$build/lib" "$plugin_build/build.ninja" "$plugin_build/CMakeFiles/"*.dir/flags.make 2>/dev/null; then
  fail "plugins/template was built against the source/build tree, not the installed SDK"
fi

step "ft strategies --verbose"
listing="$(env -u FT_PLUGIN_PATH "$prefix/bin/ft" strategies --verbose --plugin-dir "$plugin_build")"
echo "$listing"
grep -qF "file: $prefix/lib/ft/strategies/libft_strategy_single.so (built-in)" <<<"$listing" ||
  fail "single is not listed as built-in from $prefix/lib/ft/strategies"
grep -q "^local_sgd  *1\.0\.0  *Local SGD" <<<"$listing" || fail "local_sgd 1.0.0 is not listed"
grep -qF "file: $plugin (--plugin-dir)" <<<"$listing" || fail "local_sgd is not listed as coming from --plugin-dir"
listing="$(FT_PLUGIN_PATH="$plugin_build" "$prefix/bin/ft" strategies --verbose)"
grep -qF "file: $plugin (FT_PLUGIN_PATH)" <<<"$listing" || fail "local_sgd is not listed as coming from FT_PLUGIN_PATH"

if [[ ! -f "$fixture/ref_losses.json" ]]; then
  echo "SKIPPED: parity of the template plugin needs $fixture (install and out-of-tree build passed)"
  exit 77
fi

step "parity: local_sgd, 2 ranks x 16 rows, sync every step"
metrics="$work/metrics.jsonl"
(cd "$repo" && "$prefix/bin/ft" run --config configs/parity-tiny.yaml --strategy local_sgd \
   --plugin-dir "$plugin_build" --nproc 2 --threads 1 --set train.batch_size=16 \
   --set strategy.options.sync_every=1 \
   --set "model.config=$fixture/config.json" --set "model.weights=$fixture/model.safetensors" \
   --set "data.train=$fixture/data.safetensors" --metrics-out "$metrics") || fail "ft run --strategy local_sgd"
python3 - "$fixture/ref_losses.json" "$metrics" <<'EOF'
import json, sys
ref = json.load(open(sys.argv[1]))["losses"]
got = [json.loads(l)["loss"] for l in open(sys.argv[2]) if l.strip() and json.loads(l).get("event") == "step"]
if len(got) != len(ref):
    sys.exit(f"test-sdk: FAIL: {len(got)} step losses in {sys.argv[2]}, expected {len(ref)}")
worst = max(range(len(ref)), key=lambda i: abs(got[i] - ref[i]))
for i, (g, r) in enumerate(zip(got, ref)):
    print(f"  step {i + 1}: loss {g:.6f} ref {r:.6f} diff {abs(g - r):.2e}")
if abs(got[worst] - ref[worst]) > 1e-4:
    sys.exit(f"test-sdk: FAIL: step {worst + 1} loss {got[worst]} differs from the reference {ref[worst]} by more than 1e-4")
print(f"test-sdk: parity OK (max diff {abs(got[worst] - ref[worst]):.2e} <= 1e-4)")
EOF

step "ft bench: the template's theory column"
bench="$work/bench"
(cd "$repo" && "$prefix/bin/ft" bench --workload tiny --strategies local_sgd --plugin-dir "$plugin_build" \
   --steps 2 --out "$bench" >"$work/bench.log" 2>&1) || { cat "$work/bench.log"; fail "ft bench --strategies local_sgd"; }
python3 - "$bench/results.csv" <<'EOF'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1], encoding="utf-8")))
if len(rows) != 1 or rows[0]["status"] != "ok":
    sys.exit(f"test-sdk: FAIL: expected one ok local_sgd row in {sys.argv[1]}, got {rows}")
r = rows[0]
held = [int(b) for b in r["model_state_bytes_per_rank"].split(";")]
if r["theory_formula"] != "16Ψ" or not r["theory_bytes_per_rank"]:
    sys.exit(f"test-sdk: FAIL: local_sgd's theory column is '{r['theory_formula']}' '{r['theory_bytes_per_rank']}', expected 16Ψ and its bytes")
if any(b != int(r["theory_bytes_per_rank"]) for b in held):
    sys.exit(f"test-sdk: FAIL: local_sgd ranks hold {held} bytes, its theory says {r['theory_bytes_per_rank']}")
print(f"test-sdk: local_sgd theory {r['theory_formula']} = {r['theory_bytes_per_rank']} B, each rank holds {held}")
EOF
step "PASS"
