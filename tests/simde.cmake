# test_kernels (label unit): the cpu_kernels tests in their own binary, so
# they build and run whatever state the other modules are in. It also holds
# the AVX2, AVX-512 and AVX512_BF16 sources compiled a second time against
# SIMDe (tests/simde/kernels_*_simde.cpp, baseline x86-64 flags), so those
# paths are checked against the scalar path on any CPU. SIMDe is for tests
# only; the product uses the real intrinsics.
find_path(SIMDE_INCLUDE_DIR simde/x86/avx512.h)
if(SIMDE_INCLUDE_DIR)
  add_executable(test_kernels
    ${CMAKE_CURRENT_SOURCE_DIR}/simde/test_kernels.cpp
    ${CMAKE_CURRENT_SOURCE_DIR}/simde/test_kernel_paths.cpp
    ${CMAKE_CURRENT_SOURCE_DIR}/simde/test_quant_kernels.cpp
    ${CMAKE_CURRENT_SOURCE_DIR}/simde/test_thread_pool.cpp
    ${CMAKE_CURRENT_SOURCE_DIR}/simde/kernels_avx2_simde.cpp
    ${CMAKE_CURRENT_SOURCE_DIR}/simde/kernels_avx512_simde.cpp
    ${CMAKE_CURRENT_SOURCE_DIR}/simde/kernels_avx512bf16_simde.cpp
    ${CMAKE_CURRENT_SOURCE_DIR}/support/catch_main.cpp)
  target_include_directories(test_kernels PRIVATE ${CMAKE_SOURCE_DIR} ${CMAKE_CURRENT_SOURCE_DIR})
  target_include_directories(test_kernels SYSTEM PRIVATE ${SIMDE_INCLUDE_DIR})
  target_compile_options(test_kernels PRIVATE ${MOE_WARNINGS})
  # SIMDe's 256- and 512-bit types are returned by value between internal functions:
  # GCC's note that this ABI differs from real AVX-512 code does not apply.
  set_source_files_properties(
    ${CMAKE_CURRENT_SOURCE_DIR}/simde/kernels_avx2_simde.cpp
    ${CMAKE_CURRENT_SOURCE_DIR}/simde/kernels_avx512_simde.cpp
    ${CMAKE_CURRENT_SOURCE_DIR}/simde/kernels_avx512bf16_simde.cpp
    PROPERTIES COMPILE_OPTIONS -Wno-psabi)
  target_link_libraries(test_kernels PRIVATE moe_cpu_kernels Catch2::Catch2)
  catch_discover_tests(test_kernels TEST_PREFIX "unit: " PROPERTIES LABELS unit TIMEOUT 600 FAIL_REGULAR_EXPRESSION "${MOE_CATCH_FAIL_REGEX}")
else()
  message(WARNING "SIMDe (libsimde-dev) not found: test_kernels not built")
endif()
