#!/usr/bin/env bash
# Installs what the build needs beyond the Rust toolchain. Idempotent; quick when all is there.
#  - libclang-dev: rusqlite's `session` feature (state-update capture with SQLite's session
#    extension) generates its bindings with bindgen, which loads libclang at build time.
#  - fonts-dejavu-core: the text of the figures' plots (crates/plot reads DejaVuSans.ttf at run
#    time; its tests draw plots).
set -euo pipefail
need=()
# libclang-cpp (a C++ interface some machines carry) is not what bindgen loads; look for libclang
# itself, as bindgen names it: libclang.so, libclang-NN.so, or either with a version suffix.
if ! ldconfig -p 2>/dev/null | grep -Eq 'libclang(-[0-9.]+)?\.so' && ! ls /usr/lib/llvm-*/lib/libclang.so* /usr/lib/llvm-*/lib/libclang-[0-9]*.so* >/dev/null 2>&1; then
  need+=(libclang-dev)
fi
if [ ! -r /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ]; then
  need+=(fonts-dejavu-core)
fi
command -v cargo >/dev/null || { echo "setup: cargo not found; install the Rust toolchain (rustup) first" >&2; exit 1; }
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]}" >&2
  sudo_=""
  [ "$(id -u)" -eq 0 ] || sudo_="sudo"
  $sudo_ apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_ apt-get install -y -qq "${need[@]}" >/dev/null
fi
