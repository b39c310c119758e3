# Sourced by scripts/wheel (which builds accel-test's libtorch part for the wheel) and scripts/test
# (which lints it): `zig_part SUBCOMMAND ARGS...` runs cargo-zigbuild's SUBCOMMAND (zigbuild, clippy)
# on package accel-test-torch for TRIPLE.GLIBC with the one environment both use, so the lint reuses
# the build's torch-sys C++ (minutes) instead of compiling it a second time for the host.
#
# The part has a target directory of its own (target/wheel-part): cargo fingerprints every unit with
# the target's linker, and cargo-zigbuild's zig wrapper is not maturin's, so the part's build and the
# tools' (maturin --zig, target/) in one directory undid each other and every scripts/setup rebuilt both.
# Its C++ (tch's wrapper and our c10d shim) is compiled by g++ against libstdc++, which is torch's C++
# library (zig's own C++ is libc++, whose std::string is not torch's), and linked with libstdc++ and
# libgcc_s's unwinder (not zig's).
#
# Needs: root (the checkout) and arch; sets triple and glibc, the wheel's: manylinux_2_28 (RHEL/Rocky 8
# and newer).
triple=$arch-unknown-linux-gnu
glibc=2.28
zig_part_dir=$root/target/wheel-part
zig_part_so=$zig_part_dir/$triple/release/libaccel_test_torch.so
zig_part() {
  local sub=$1 cxx_var=CXX_${triple//-/_}
  shift
  mkdir -p "$root/target/wheel-lib"
  ln -sf "$(g++ -print-file-name=libgomp.so)" "$root/target/wheel-lib/libgomp.so"
  env "$cxx_var=g++" CXXSTDLIB= LIBTORCH_USE_PYTORCH=1 CARGO_TARGET_DIR="$zig_part_dir" \
    ACCEL_LINK_LIBS="$(g++ -print-file-name=libstdc++.so.6):$(g++ -print-file-name=libgcc_s.so.1)" \
    ACCEL_LINK_SEARCH="$root/target/wheel-lib" \
    cargo-zigbuild "$sub" --release -p accel-test-torch --target "$triple.$glibc" "$@"
}
# scripts/wheel's PATH for zig: ziglang's own launcher as `zig`, the project's venv before the tools'
# (torch-sys and the part's build.rs ask `python3` for torch).
zig_part_path() {
  mkdir -p "$root/target/wheel-bin"
  ln -sf "$root/.venv-wheel/bin/python-zig" "$root/target/wheel-bin/zig"
  export PATH="$root/target/wheel-bin:$root/.venv/bin:$root/.venv-wheel/bin:$PATH"
}
