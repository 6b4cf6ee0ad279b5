# test_kernels (label unit): the cpu_kernels tests in their own binary, so
# they build and run whatever state the other modules are in. It also holds
# the AVX2, AVX-512 and AVX512_BF16 sources compiled a second time against
# SIMDe (tests/simde/kernels_*_simde.cpp, baseline x86-64 flags), so those
# paths are checked against the scalar path on any CPU. SIMDe is for tests
# only; the product uses the real intrinsics.
find_path(SIMDE_INCLUDE_DIR simde/x86/avx512.h)
if(SIMDE_INCLUDE_DIR)
  set(KERNEL_SIMDE_SOURCES
    ${CMAKE_CURRENT_SOURCE_DIR}/simde/kernels_avx2_simde.cpp
    ${CMAKE_CURRENT_SOURCE_DIR}/simde/kernels_avx512_simde.cpp
    ${CMAKE_CURRENT_SOURCE_DIR}/simde/kernels_avx512bf16_simde.cpp)
  # The sanitizer build (scripts/sanitize_build.sh) checks the native paths
  # this CPU runs: the SIMDe copies are the same sources, checked by the main
  # build, and take minutes to compile instrumented.
  if(MOE_SANITIZE)
    set(KERNEL_SIMDE_SOURCES "")
  endif()
  add_executable(test_kernels
    ${CMAKE_CURRENT_SOURCE_DIR}/simde/test_kernels.cpp
    ${CMAKE_CURRENT_SOURCE_DIR}/simde/test_kernel_paths.cpp
    ${CMAKE_CURRENT_SOURCE_DIR}/simde/test_delta_rule.cpp
    ${CMAKE_CURRENT_SOURCE_DIR}/simde/test_quant_kernels.cpp
    ${CMAKE_CURRENT_SOURCE_DIR}/simde/test_thread_pool.cpp
    ${KERNEL_SIMDE_SOURCES})
  if(MOE_SANITIZE)
    target_compile_definitions(test_kernels PRIVATE MOE_TEST_NO_SIMDE=1)
  endif()
  target_include_directories(test_kernels PRIVATE ${CMAKE_SOURCE_DIR} ${CMAKE_CURRENT_SOURCE_DIR})
  target_include_directories(test_kernels SYSTEM PRIVATE ${SIMDE_INCLUDE_DIR})
  target_compile_options(test_kernels PRIVATE ${MOE_WARNINGS})
  # SIMDe's 256- and 512-bit types are returned by value between internal functions:
  # GCC's note that this ABI differs from real AVX-512 code does not apply.
  # -O1: these copies are checked for their results, not timed, and at -O3
  # g++ spends minutes on SIMDe's emulated intrinsics (kernels_avx512bf16_simde:
  # 411 s against 18 s at -O1), the longest step of a fresh build.
  set_source_files_properties(
    ${CMAKE_CURRENT_SOURCE_DIR}/simde/kernels_avx2_simde.cpp
    ${CMAKE_CURRENT_SOURCE_DIR}/simde/kernels_avx512_simde.cpp
    ${CMAKE_CURRENT_SOURCE_DIR}/simde/kernels_avx512bf16_simde.cpp
    PROPERTIES COMPILE_OPTIONS "-Wno-psabi;-O1")
  target_link_libraries(test_kernels PRIVATE moe_cpu_kernels moe_catch_main)
  moe_discover_tests(test_kernels cpu_kernels PREFIX "cpu_kernels (SIMDe): ")
else()
  message(WARNING "SIMDe (libsimde-dev) not found: test_kernels not built")
endif()
