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

# libelf without its local-exec TLS error object.
if(NOT TARGET cudaw::elf)
  set(_elf_repacked "${CMAKE_BINARY_DIR}/third_party/libelf_pic.a")
  set(_elf_dir "${CMAKE_BINARY_DIR}/third_party/libelf_objs")
  add_custom_command(
    OUTPUT "${_elf_repacked}"
    COMMAND ${CMAKE_COMMAND} -E rm -rf "${_elf_dir}"
    COMMAND ${CMAKE_COMMAND} -E make_directory "${_elf_dir}"
    COMMAND ${CMAKE_COMMAND} -E chdir "${_elf_dir}" ${CMAKE_AR} x "${elf_full_LIBRARY}"
    COMMAND ${CMAKE_COMMAND} -E rm -f "${_elf_dir}/elf_error.o"
    COMMAND sh -c "${CMAKE_AR} rcs '${_elf_repacked}' '${_elf_dir}'/*.o"
    DEPENDS "${elf_full_LIBRARY}"
    COMMENT "Repacking libelf.a without its local-exec TLS object")
  add_custom_target(cudaw_elf_repack DEPENDS "${_elf_repacked}")
  add_library(cudaw::elf STATIC IMPORTED GLOBAL)
  set_target_properties(cudaw::elf PROPERTIES
    IMPORTED_LOCATION "${_elf_repacked}"
    INTERFACE_INCLUDE_DIRECTORIES "${elf_full_INCLUDE}"
    INTERFACE_LINK_LIBRARIES "cudaw::zstd;cudaw::zlib")
  add_dependencies(cudaw::elf cudaw_elf_repack)
endif()

# Debian's libjansson.a is built as position-independent executable code: load.o reads libc's
# `stdin` through a PC-relative relocation (json_loadf compares its FILE * with stdin to name
# the source "<stdin>"), which a shared object cannot have. We repack the archive with that one
# symbol renamed to cudaw_jansson_stdin, a hidden variable of our own (checkpoint/manifest.c)
# that is never a real stream: the comparison is then always false. Nothing else changes.
if(NOT TARGET cudaw::jansson)
  set(_jansson_repacked "${CMAKE_BINARY_DIR}/third_party/libjansson_pic.a")
  set(_jansson_dir "${CMAKE_BINARY_DIR}/third_party/libjansson_objs")
  add_custom_command(
    OUTPUT "${_jansson_repacked}"
    COMMAND ${CMAKE_COMMAND} -E rm -rf "${_jansson_dir}"
    COMMAND ${CMAKE_COMMAND} -E make_directory "${_jansson_dir}"
    COMMAND ${CMAKE_COMMAND} -E chdir "${_jansson_dir}" ${CMAKE_AR} x "${jansson_full_LIBRARY}"
    COMMAND ${CMAKE_OBJCOPY} --redefine-sym stdin=cudaw_jansson_stdin "${_jansson_dir}/load.o"
    COMMAND sh -c "${CMAKE_AR} rcs '${_jansson_repacked}' '${_jansson_dir}'/*.o"
    DEPENDS "${jansson_full_LIBRARY}"
    COMMENT "Repacking libjansson.a without its reference to stdin")
  add_custom_target(cudaw_jansson_repack DEPENDS "${_jansson_repacked}")
  add_library(cudaw::jansson STATIC IMPORTED GLOBAL)
  set_target_properties(cudaw::jansson PROPERTIES
    IMPORTED_LOCATION "${_jansson_repacked}"
    INTERFACE_INCLUDE_DIRECTORIES "${jansson_full_INCLUDE}")
  add_dependencies(cudaw::jansson cudaw_jansson_repack)
endif()
