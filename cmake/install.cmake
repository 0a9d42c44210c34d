include(GNUInstallDirs)
include(CMakePackageConfigHelpers)
# One export set per component: xattnConfig.cmake loads a component's targets only when it is
# asked for, after finding that component's dependencies.
install(TARGETS xattn EXPORT xattnTargets)
install(EXPORT xattnTargets NAMESPACE xattn:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/xattn)
# libxattn_kernels, for the -march this build was made with (XATTN_MARCH)
install(TARGETS xattn_kernels EXPORT xattn-kernels-targets)
install(EXPORT xattn-kernels-targets NAMESPACE xattn:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/xattn)
if(TARGET xattn_nn)
  install(TARGETS xattn_nn EXPORT xattn-nn-targets)
  install(EXPORT xattn-nn-targets NAMESPACE xattn:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/xattn)
endif()
if(TARGET xattn_mpi)
  install(TARGETS xattn_mpi EXPORT xattn-mpi-targets)
  install(EXPORT xattn-mpi-targets NAMESPACE xattn:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/xattn)
endif()
if(TARGET xattn_c)
  install(TARGETS xattn_c EXPORT xattn-c-targets)
  install(FILES c/include/xattn.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
  # the C interface's glue, header-only: what the Python package's compiled policies include
  install(DIRECTORY c/include/xattn/c_api DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/xattn)
  install(EXPORT xattn-c-targets NAMESPACE xattn:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/xattn)
endif()
set(XATTN_HAS_C ${XATTN_BUILD_C})
set(XATTN_HAS_NN ${BLAS_FOUND})  # read by xattnConfig.cmake.in
set(XATTN_HAS_MPI ${MPI_CXX_FOUND})
if(NOT XATTN_HAS_NN)
  set(XATTN_HAS_NN FALSE)
endif()
if(NOT XATTN_HAS_MPI)
  set(XATTN_HAS_MPI FALSE)
endif()
install(DIRECTORY include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
configure_package_config_file(cmake/xattnConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/xattnConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/xattn)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/xattnConfigVersion.cmake
  COMPATIBILITY SameMinorVersion ARCH_INDEPENDENT)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/xattnConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/xattnConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/xattn)
