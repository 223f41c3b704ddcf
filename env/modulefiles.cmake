# Writes the Lmod and Environment Modules modulefiles for PREFIX:
#   PREFIX/share/modulefiles/lmod/fsdpskip/VERSION.lua
#   PREFIX/share/modulefiles/tcl/fsdpskip/VERSION
# Run at configure time for the build tree and by `cmake --install` for the
# installed one (the prefix is known only then).
set(FSDPSKIP_PREFIX "${PREFIX}")
set(FSDPSKIP_VERSION "${VERSION}")
configure_file("${TEMPLATES}/fsdpskip.lua.in" "${PREFIX}/share/modulefiles/lmod/fsdpskip/${VERSION}.lua" @ONLY)
configure_file("${TEMPLATES}/fsdpskip.tcl.in" "${PREFIX}/share/modulefiles/tcl/fsdpskip/${VERSION}" @ONLY)
