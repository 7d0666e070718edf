# What `cmake --install` puts where, in two components:
#   runtime      the shared libraries, under lib/: libcollops.so, libcollops_mpi.so (backend
#                "mpi", loaded from beside libcollops.so), libcollops_torch.so and its ATB-named
#                alias libatb_test_framework.so
#   development  the public headers under include/collops/ (core's collops/*.h and every op's param
#                struct under collops/ops/), and the CMake package under lib/cmake/collops/:
#                exported targets collops::collops, collops::mpi, collops::torch and the version
# The wheel (pyproject.toml) installs the runtime component with the prefix <site-packages>/collops,
# so the libraries land in collops/lib/, where `import collops` looks for them.
include(CMakePackageConfigHelpers)

set(COLLOPS_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/collops)

# Core headers: everything in core/include/collops is public; the MPI adoption header only where
# collops::mpi exists (it includes <mpi.h>). The rest of core/ and of ops/ is private.
set(COLLOPS_HEADER_EXCLUDES)
if(NOT TARGET collops_mpi)
  list(APPEND COLLOPS_HEADER_EXCLUDES PATTERN mpi_communicator.h EXCLUDE)
endif()
install(DIRECTORY ${PROJECT_SOURCE_DIR}/core/include/collops
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT development
        FILES_MATCHING PATTERN "*.h" ${COLLOPS_HEADER_EXCLUDES})
# Ops: ops.h and each op's param struct (<collops/ops/<op>/<op>_param.h>).
install(FILES ${PROJECT_SOURCE_DIR}/ops/ops.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/collops/ops COMPONENT development)
file(GLOB COLLOPS_PARAM_HEADERS CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/ops/*/*_param.h)
foreach(header IN LISTS COLLOPS_PARAM_HEADERS)
  get_filename_component(op_dir ${header} DIRECTORY)
  get_filename_component(op_name ${op_dir} NAME)
  install(FILES ${header} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/collops/ops/${op_name}
          COMPONENT development)
endforeach()

install(TARGETS collops EXPORT collopsTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime)
install(EXPORT collopsTargets NAMESPACE collops:: DESTINATION ${COLLOPS_INSTALL_CMAKEDIR}
        COMPONENT development)

if(TARGET collops_mpi)
  set_target_properties(collops_mpi PROPERTIES EXPORT_NAME mpi)
  install(TARGETS collops_mpi EXPORT collopsMpiTargets
          LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime)
  install(EXPORT collopsMpiTargets NAMESPACE collops:: DESTINATION ${COLLOPS_INSTALL_CMAKEDIR}
          COMPONENT development)
endif()

if(TARGET collops_torch)
  set_target_properties(collops_torch PROPERTIES EXPORT_NAME torch)
  install(TARGETS collops_torch EXPORT collopsTorchTargets
          LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime)
  install(TARGETS collops_atb_alias LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime)
  install(EXPORT collopsTorchTargets NAMESPACE collops:: DESTINATION ${COLLOPS_INSTALL_CMAKEDIR}
          COMPONENT development)
endif()

configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/collopsConfig.cmake.in
  ${PROJECT_BINARY_DIR}/collopsConfig.cmake INSTALL_DESTINATION ${COLLOPS_INSTALL_CMAKEDIR})
# 0.x: a minor version may change the interface, so only the same MAJOR.MINOR satisfies a request.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/collopsConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/collopsConfig.cmake ${PROJECT_BINARY_DIR}/collopsConfigVersion.cmake
        DESTINATION ${COLLOPS_INSTALL_CMAKEDIR} COMPONENT development)
