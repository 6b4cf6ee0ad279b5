# GPU tests (label gpu): built only with CUDA. Every test reports itself
# skipped (SKIP_REGULAR_EXPRESSION) where no CUDA device exists, saying why,
# so `ctest -L gpu` on a machine without one shows them as not run.
if(MOE_HAVE_CUDA)
  file(GLOB GPU_TEST_SOURCES CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/gpu/*.cpp)
  add_executable(test_gpu ${GPU_TEST_SOURCES})
  target_include_directories(test_gpu PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/gpu)
  target_compile_options(test_gpu PRIVATE ${MOE_WARNINGS})
  target_link_libraries(test_gpu PRIVATE moe_test_support)
  add_dependencies(test_gpu moe-server)
  moe_discover_tests(test_gpu gpu TIMEOUT 900 NO_SLOW PROPERTIES SKIP_REGULAR_EXPRESSION "gpu: skipped")
endif()
