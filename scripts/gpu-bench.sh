#!/usr/bin/env bash
# ft on one CUDA GPU against PyTorch eager (autocast, SDPA) on the same rows:
# BERT-base's shape (random init), fp32 and bf16, on the bench-mini rows
# (padded to each batch's longest) and the seeds' Weibo rows (padded to 128,
# 15 % real tokens), global batch 32, single process.
#
#   scripts/gpu-bench.sh pack     here (Debian 12, apt): writes .gpu-carry/ (git-ignored):
#                                 sysroot.tar.xz, the Debian C++ libraries ft builds with
#                                 (pruned: no static libraries or docs, Boost's headers
#                                 that ft includes), and the two fixtures from ../shared
#                                 (xz; python3 unpacks them there), since a GPU machine reaches no package registry
#                                 and ../shared does not travel with the tree.
#   scripts/gpu-bench.sh run      on the GPU machine: builds ft against python3's LibTorch
#                                 (scripts/build-torch2.sh, into build-cuda/), then prints
#                                 the table; raw JSON lines and logs go to $OUT or
#                                 bench-out/gpu/.
#   DEVICE=cpu STEPS=4 SHAPE=mini PYTHON=.venv-hf/bin/python BUILD=build scripts/gpu-bench.sh run
#                                 checks the script itself on a CPU machine (no build when
#                                 BUILD names an existing build).
#
# The peer is scripts/peer_bench.py --device cuda --attn sdpa: the same BERT,
# initialisation, rows, batch order and AdamW; both leave the first 2 steps out
# of samples/s. Neither side enables TF32 (both frameworks' default).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
carry="$repo/.gpu-carry"
workloads=(bench-mini bench-weibo)

pack() {
  local debs root
  debs="$(mktemp -d)"; root="$(mktemp -d)"
  # What scripts/setup.sh installs beyond device-debs.sh's list, and libcurl's
  # run-time closure (the GPU machine's image is not Debian).
  bash "$repo/../shared/tools/device-debs.sh" fetch "$debs" \
    libssl-dev libssl3 libonig-dev libonig5 libprotobuf-dev libprotobuf32 protobuf-compiler libprotoc32 \
    libdnnl-dev libdnnl2 ocl-icd-libopencl1 libonnx-dev libonnx1 libonnxifi libcurl4-openssl-dev libcurl4 libtcmalloc-minimal4 pkgconf pkgconf-bin libpkgconf3 \
    libnghttp2-14 libidn2-0 librtmp1 libssh2-1 libpsl5 libgssapi-krb5-2 libkrb5-3 libk5crypto3 \
    libkrb5support0 libkeyutils1 libldap-2.5-0 libsasl2-2 libbrotli1 libzstd1 libgnutls30 libnettle8 \
    libhogweed6 libgmp10 libp11-kit0 libtasn1-6 libunistring2 libffi8 libcom-err2 >/dev/null
  for f in "$debs"/*.deb; do dpkg -x "$f" "$root"; done
  # (ONNX's CMake targets check that their files exist, a static one too.)
  find "$root" -name '*.a' ! -name 'libonnxifi_loader.a' -delete
  rm -rf "$root"/usr/share/{doc,man,lintian,locale,info} "$root"/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal_debug*
  # Boost: the header trees ft's plugin loader (Boost.DLL) reaches, 4 of 162 MB.
  local keep=(assert assert.hpp config config.hpp core cstdint.hpp current_function.hpp detail dll exception
              filesystem move predef static_assert.hpp swap.hpp system throw_exception.hpp type_traits version.hpp)
  mkdir "$root/boost-keep"
  for k in "${keep[@]}"; do mv "$root/usr/include/boost/$k" "$root/boost-keep/"; done
  rm -rf "$root/usr/include/boost"; mv "$root/boost-keep" "$root/usr/include/boost"
  mkdir -p "$carry"
  tar -C "$root" -cJf "$carry/sysroot.tar.xz" .
  for w in "${workloads[@]}"; do
    mkdir -p "$carry/$w"
    cp "$repo/../shared/fixtures/$w/config.json" "$carry/$w/"
    xz -T0 -c "$repo/../shared/fixtures/$w/data.safetensors" >"$carry/$w/data.safetensors.xz"
  done
  rm -rf "$debs" "$root"
  du -sh "$carry"
  echo "gpu-bench: carry .gpu-carry, then run: scripts/gpu-bench.sh run"
}

# The Debian libraries, unpacked under /tmp: for the build and for ft only
# (python3 and its torch keep the image's own libraries).
sysroot_env() {
  local root=/tmp/ft-sysroot lib
  lib="$root/usr/lib/x86_64-linux-gnu"
  export CMAKE_PREFIX_PATH="$root/usr:$lib/cmake${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
  export CPATH="$root/usr/include:$root/usr/include/x86_64-linux-gnu${CPATH:+:$CPATH}"
  export LIBRARY_PATH="$lib${LIBRARY_PATH:+:$LIBRARY_PATH}"
  export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export PATH="$PATH:$root/usr/bin"
  # Debian's .pc files say prefix=/usr: the sysroot prefix moves them here.
  export PKG_CONFIG_LIBDIR="$lib/pkgconfig:$root/usr/share/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$root"
}

run() {
  local out="${OUT:-$repo/bench-out/gpu}" work=/tmp/ft-gpu device="${DEVICE:-cuda}" py="${PYTHON:-python3}"
  local build="${BUILD:-build-cuda}"
  mkdir -p "$out" "$work"
  if [[ "$device" == cuda ]]; then
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
    "$py" -c 'import torch; print("torch", torch.__version__, torch.cuda.get_device_name(0))' | tee -a "$out/gpu.txt"
  fi
  if [[ -f "$carry/sysroot.tar.xz" ]]; then
    mkdir -p /tmp/ft-sysroot
    "$py" -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
      "$carry/sysroot.tar.xz" /tmp/ft-sysroot
  fi
  local t0=$SECONDS
  if [[ ! -x "$build/bin/ft" || "$build" == build-cuda ]]; then
    if ! (sysroot_env; BUILD_DIR="$repo/$build" TORCH2_PYTHON="$py" FORCE_SHIM=1 \
          scripts/build-torch2.sh ft_runtime) >"$out/build.log" 2>&1; then
      grep -E "error|FAILED" "$out/build.log" | head -20; tail -5 "$out/build.log"
      echo "gpu-bench: build failed (log: $out/build.log)"; exit 1
    fi
    echo "gpu-bench: built in $((SECONDS - t0)) s"
  fi
  for w in "${workloads[@]}"; do
    local dir="$work/$w"
    mkdir -p "$dir"
    if [[ -f "$carry/$w/data.safetensors.xz" ]]; then
      cp "$carry/$w/config.json" "$dir/"
      "$py" -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
        "$carry/$w/data.safetensors.xz" "$dir/data.safetensors"
    else
      cp "$repo/../shared/fixtures/$w/"{config.json,data.safetensors} "$dir/"
    fi
  done
  # BERT-base's shape (bert-base-chinese's 21 128-row vocabulary covers both fixtures' ids).
  "$py" - "$work/bench-mini/config.json" "$work/bert-base.json" "${SHAPE:-base}" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1]))
if sys.argv[3] == "base":
    c.update(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072, vocab_size=21128)
json.dump(c, open(sys.argv[2], "w"), indent=1)
EOF
  local steps="${STEPS:-64}"
  sps() { sed -E 's/.*"samples_per_s":[ ]*([-0-9.eE+]+).*/\1/'; }
  mem() { sed -E 's/.*"peak_device_mb":[ ]*\[?([-0-9.eE+]+).*/\1/'; }
  echo "| rows | precision | PyTorch eager + SDPA (samples/s, peak MB) | ft padded | ft | ft / PyTorch |" | tee "$out/table.md"
  echo "|---|---|---:|---:|---:|---:|" | tee -a "$out/table.md"
  for w in "${workloads[@]}"; do
    local pad=longest; [[ "$w" == bench-weibo ]] && pad=max_length
    for p in fp32 bf16; do
      local peer ftp ftf
      peer="$(timeout 150 "$py" scripts/peer_bench.py --fixture "$work/$w" --config "$work/bert-base.json" \
        --device "$device" --attn sdpa --precision "$p" --padding "$pad" --strategy single --steps "$steps" \
        2>>"$out/peer.log" | tee -a "$out/peer.jsonl")" || { echo "peer $w $p failed"; tail -5 "$out/peer.log"; }
      for pf in false true; do
        rm -rf "$work/run" "$work/m.jsonl"
        (sysroot_env; timeout 150 "$build/bin/ft" run --config configs/bench-mini.yaml --strategy single \
          --precision "$p" --max-steps "$steps" --output-dir "$work/run" --metrics-out "$work/m.jsonl" \
          --set runtime.device="$device" --set model.config="$work/bert-base.json" \
          --set data.train="$work/$w/data.safetensors" --set data.padding="$pad" \
          --set model.padding_free="$pf") >>"$out/ft.log" 2>&1 || { echo "ft $w $p failed"; tail -5 "$out/ft.log"; }
        grep '"event":"summary"' "$work/m.jsonl" | sed "s/^/{\"rows\":\"$w\",\"padding_free\":$pf,\"x\":/; s/\$/}/" >>"$out/ft.jsonl" || true
        local s; s="$(grep '"event":"summary"' "$work/m.jsonl" || true)"
        if [[ "$pf" == false ]]; then ftp="$s"; else ftf="$s"; fi
      done
      awk -v w="$w" -v p="$p" -v ps="$(sps <<<"$peer")" -v pm="$(mem <<<"$peer")" \
          -v fp="$(sps <<<"$ftp")" -v fpm="$(mem <<<"$ftp")" -v ff="$(sps <<<"$ftf")" -v ffm="$(mem <<<"$ftf")" 'BEGIN {
        printf "| %s | %s | %.0f, %.0f | %.0f, %.0f | %.0f, %.0f | **%.2fx** |\n", w, p, ps, pm, fp, fpm, ff, ffm, ff / ps }' |
        tee -a "$out/table.md"
    done
  done
}

case "${1:-}" in
  pack) pack ;;
  run) run ;;
  *) echo "usage: scripts/gpu-bench.sh pack|run" >&2; exit 2 ;;
esac
