#!/usr/bin/env python3
"""Wrap the fatbinary of delta_kernel.cu (cubins for the common GPU generations and PTX for the
rest) into a C header, delta_kernel_image.h.

usage: delta_image.py <kernel.fatbin> <header.h>   (checkpoint/CMakeLists.txt runs nvcc, then this)
"""
import sys


def main():
    fatbin_path, header_path = sys.argv[1], sys.argv[2]
    with open(fatbin_path, "rb") as f:
        data = f.read()
    if data[:4] != bytes.fromhex("50ed55ba"):
        sys.exit(f"{fatbin_path}: not a fatbinary (magic {data[:4].hex()})")
    out = ["/* Generated at build time by checkpoint/delta_image.py from checkpoint/delta_kernel.cu",
           " * (nvcc -fatbin, see checkpoint/CMakeLists.txt); do not edit. */",
           "#ifndef CUDAW_CKPT_DELTA_KERNEL_IMAGE_H",
           "#define CUDAW_CKPT_DELTA_KERNEL_IMAGE_H",
           "",
           "/* 8-byte aligned: the driver reads the fatbinary's header fields in place. */",
           "static const unsigned char ckpt_delta_kernel_image[%d] __attribute__((aligned(8))) = {"
           % len(data)]
    for at in range(0, len(data), 16):
        out.append("    " + ", ".join("0x%02x" % b for b in data[at:at + 16]) + ",")
    out += ["};", "", "#endif", ""]
    with open(header_path, "w", encoding="ascii") as f:
        f.write("\n".join(out))


if __name__ == "__main__":
    main()
