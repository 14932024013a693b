# Third-party libraries, linked statically into cudaw and hidden (-Wl,--exclude-libs,ALL), so that
# cudaw never clashes with an application's own copy. Each becomes an imported target cudaw::<name>.
#
# Debian's libelf.a is built with local-exec TLS in one object (elf_error.o), which cannot be
# linked into a shared object. We repack the archive without that object and provide the three
# functions it held ourselves (kparam/elf_errors.c). Every other object of it links as is.
include_guard(GLOBAL)

function(cudaw_static_lib target header lib)
  find_path(${target}_INCLUDE ${header})
  find_library(${target}_LIBRARY NAMES ${lib})
  if(NOT ${target}_INCLUDE OR NOT ${target}_LIBRARY)
    message(FATAL_ERROR "cudaw needs ${lib} and ${header} (Debian: the -dev package); "
                        "see README.md, 'Fresh machine'")
  endif()
  add_library(cudaw::${target} STATIC IMPORTED GLOBAL)
  set_target_properties(cudaw::${target} PROPERTIES
    IMPORTED_LOCATION "${${target}_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${${target}_INCLUDE}")
endfunction()

cudaw_static_lib(zlib     zlib.h               libz.a)
cudaw_static_lib(zstd     zstd.h               libzstd.a)
cudaw_static_lib(lz4      lz4.h                liblz4.a)
cudaw_static_lib(capstone capstone/capstone.h  libcapstone.a)
cudaw_static_lib(xxhash   xxhash.h             libxxhash.a)
cudaw_static_lib(jansson_full jansson.h        libjansson.a)
cudaw_static_lib(elf_full libelf.h             libelf.a)

# Repack the archive `full` (a cudaw_static_lib) as cudaw::<target> after running the command in
# ARGN in the directory of its extracted objects.
function(cudaw_repacked_lib target full comment)
  if(TARGET cudaw::${target})
    return()
  endif()
  set(repacked "${CMAKE_BINARY_DIR}/third_party/lib${target}_pic.a")
  set(dir "${CMAKE_BINARY_DIR}/third_party/lib${target}_objs")
  add_custom_command(
    OUTPUT "${repacked}"
    COMMAND ${CMAKE_COMMAND} -E rm -rf "${dir}"
    COMMAND ${CMAKE_COMMAND} -E make_directory "${dir}"
    COMMAND ${CMAKE_COMMAND} -E chdir "${dir}" ${CMAKE_AR} x "${${full}_LIBRARY}"
    COMMAND ${CMAKE_COMMAND} -E chdir "${dir}" ${ARGN}
    COMMAND sh -c "${CMAKE_AR} rcs '${repacked}' '${dir}'/*.o"
    DEPENDS "${${full}_LIBRARY}"
    COMMENT "${comment}")
  add_custom_target(cudaw_${target}_repack DEPENDS "${repacked}")
  add_library(cudaw::${target} STATIC IMPORTED GLOBAL)
  set_target_properties(cudaw::${target} PROPERTIES
    IMPORTED_LOCATION "${repacked}"
    INTERFACE_INCLUDE_DIRECTORIES "${${full}_INCLUDE}")
  add_dependencies(cudaw::${target} cudaw_${target}_repack)
endfunction()

# libelf without its local-exec TLS error object.
cudaw_repacked_lib(elf elf_full "Repacking libelf.a without its local-exec TLS object"
                   ${CMAKE_COMMAND} -E rm -f elf_error.o)
set_target_properties(cudaw::elf PROPERTIES INTERFACE_LINK_LIBRARIES "cudaw::zstd;cudaw::zlib")

# Debian's libjansson.a is built as position-independent executable code: load.o reads libc's
# `stdin` through a PC-relative relocation (json_loadf compares its FILE * with stdin to name
# the source "<stdin>"), which a shared object cannot have. We repack the archive with that one
# symbol renamed to cudaw_jansson_stdin, a hidden variable of our own (checkpoint/manifest.c)
# that is never a real stream: the comparison is then always false. Nothing else changes.
cudaw_repacked_lib(jansson jansson_full "Repacking libjansson.a without its reference to stdin"
                   ${CMAKE_OBJCOPY} --redefine-sym stdin=cudaw_jansson_stdin load.o)
