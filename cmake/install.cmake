include(GNUInstallDirs)
include(CMakePackageConfigHelpers)
install(TARGETS xattn EXPORT xattnTargets)
if(TARGET xattn_nn)
  install(TARGETS xattn_nn EXPORT xattnTargets)
endif()
if(TARGET xattn_mpi)
  install(TARGETS xattn_mpi EXPORT xattnTargets)
endif()
set(XATTN_HAS_NN ${BLAS_FOUND})  # read by xattnConfig.cmake.in
set(XATTN_HAS_MPI ${MPI_CXX_FOUND})
install(DIRECTORY include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT xattnTargets NAMESPACE xattn:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/xattn)
configure_package_config_file(cmake/xattnConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/xattnConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/xattn)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/xattnConfigVersion.cmake
  COMPATIBILITY SameMinorVersion ARCH_INDEPENDENT)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/xattnConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/xattnConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/xattn)
