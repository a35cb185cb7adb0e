# Package config for third-party strategy plugins: after
#   cmake --install <build> --prefix P
# a project with -DCMAKE_PREFIX_PATH=P can
#   find_package(ft REQUIRED)
#   ft_add_strategy(my_strategy SOURCES my_strategy.cpp)
# and gets ft::core (LibTorch, fmt, Boost headers and the C++ ABI flag come
# with it) plus the very ft_add_strategy the built-in strategies use.
#
# Installed layout (P/):
#   bin/ft                         RUNPATH $ORIGIN/../lib
#   lib/libft_core.so
#   lib/ft/strategies/*.so         built-in plugins, RUNPATH $ORIGIN/../..
#   lib/cmake/ft/                  ftConfig.cmake, ftConfigVersion.cmake,
#                                  ftTargets*.cmake, FtStrategy.cmake
#   include/ft/<area>/*.h          the public headers, one folder per core/src/<area>/
include(CMakePackageConfigHelpers)

set(FT_INSTALL_CMAKEDIR ${FT_INSTALL_LIBDIR}/cmake/ft)
# Recorded in ftConfig.cmake so a plugin build picks the same LibTorch by
# default and fails at configure time (not at load time) on another one.
set(FT_TORCH_VERSION ${Torch_VERSION})
set(FT_TORCH_DIR ${Torch_DIR})

install(EXPORT ftTargets NAMESPACE ft:: FILE ftTargets.cmake DESTINATION ${FT_INSTALL_CMAKEDIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/ftConfig.cmake.in
  ${PROJECT_BINARY_DIR}/cmake/ftConfig.cmake
  INSTALL_DESTINATION ${FT_INSTALL_CMAKEDIR})
# The plugin ABI (kPluginAbiVersion) is what really decides compatibility;
# the host checks it at load time. Until 1.0, a minor bump may change it.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/cmake/ftConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES
  ${PROJECT_BINARY_DIR}/cmake/ftConfig.cmake
  ${PROJECT_BINARY_DIR}/cmake/ftConfigVersion.cmake
  ${PROJECT_SOURCE_DIR}/cmake/FtStrategy.cmake
  DESTINATION ${FT_INSTALL_CMAKEDIR})
