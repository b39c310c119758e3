// Keeps accel-test's libtorch part loadable on the glibc and libstdc++ that torch's own manylinux_2_28
// wheels need (RHEL/Rocky 8: glibc 2.28, GLIBCXX_3.4.25), though the C++ here is compiled by a newer g++:
// the two symbols such code takes from newer runtimes are defined here, hidden, so that they bind inside
// this object and add no version requirement. `objdump -T` on the wheel's libaccel_test_torch.so (and
// `auditwheel show`, tests/wheel.rs) lists no GLIBC_2.29+ or GLIBCXX_3.4.26+ symbol.

#include <sstream>

extern "C" {
// glibc 2.32 tells libstdc++'s inline reference counting that the process has one thread, so it may
// skip atomics. 0 ("maybe several") is always correct: the atomic path is taken.
__attribute__((visibility("hidden"))) char __libc_single_threaded = 0;

// GLIBCXX_3.4.26 (GCC 9) added a separate default constructor of std::ostringstream; it is the
// out-mode constructor of every earlier libstdc++.
__attribute__((visibility("hidden"))) void accel_ostringstream_default(std::ostringstream* self) __asm__(
    "_ZNSt7__cxx1119basic_ostringstreamIcSt11char_traitsIcESaIcEEC1Ev");
void accel_ostringstream_default(std::ostringstream* self) {
  new (self) std::ostringstream(std::ios_base::out);
}
}
