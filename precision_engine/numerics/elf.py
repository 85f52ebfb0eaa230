"""The shared libraries an ELF shared object names as NEEDED, read from its dynamic segment without binutils.

DeepGEMM's host module must take the C++ runtime from the process: built by a g++ that links libstdc++
statically (the H200 image's default), its first GEMM crashed the process inside that second copy's
`std::regex` (eighteenth session, README "DeepGEMM"), where no fallback can catch it. `gemm` reads the module's
NEEDED entries before AUTO ever launches it.
"""

from __future__ import annotations

import struct
from pathlib import Path

_PT_LOAD, _PT_DYNAMIC = 1, 2
_DT_NULL, _DT_NEEDED, _DT_STRTAB = 0, 1, 5
_CXX_RUNTIMES = ("libstdc++.so", "libc++.so")


def needed_libraries(path: str | Path) -> list[str]:
    """The NEEDED entries of the 64-bit little-endian ELF file at `path` (x86-64, aarch64), in order; [] for a
    file without a dynamic segment. ValueError for anything else, or a file too damaged to read."""
    data = Path(path).read_bytes()
    if data[:4] != b"\x7fELF" or data[4:6] != b"\x02\x01":
        raise ValueError(f"{path}: not a 64-bit little-endian ELF file")
    try:
        (phoff,) = struct.unpack_from("<Q", data, 0x20)
        phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
        # (p_type, p_flags, p_offset, p_vaddr, p_paddr, p_filesz) of each program header
        segments = [struct.unpack_from("<IIQQQQ", data, phoff + i * phentsize) for i in range(phnum)]
        dynamic = next((s for s in segments if s[0] == _PT_DYNAMIC), None)
        if dynamic is None:
            return []
        tags = []
        for at in range(dynamic[2], dynamic[2] + dynamic[5], 16):
            tag, value = struct.unpack_from("<qQ", data, at)
            if tag == _DT_NULL:
                break
            tags.append((tag, value))
        strtab = _file_offset(segments, next(value for tag, value in tags if tag == _DT_STRTAB))
        return [_c_string(data, strtab + value) for tag, value in tags if tag == _DT_NEEDED]
    except (struct.error, StopIteration, ValueError) as err:  # no string table, or offsets past the end
        raise ValueError(f"{path}: unreadable ELF dynamic segment ({type(err).__name__}: {err})") from err


def links_cxx_runtime(path: str | Path) -> bool:
    """Whether the ELF file at `path` takes a C++ runtime (libstdc++ or libc++) from the process as a shared
    library; False where it links none, as a C++ module with the runtime linked in statically does."""
    return any(name.startswith(_CXX_RUNTIMES) for name in needed_libraries(path))


def _file_offset(segments: list[tuple], address: int) -> int:
    for p_type, _, offset, vaddr, _, size in segments:
        if p_type == _PT_LOAD and vaddr <= address < vaddr + size:
            return address - vaddr + offset
    raise ValueError(f"address {address:#x} lies in no loaded segment")


def _c_string(data: bytes, at: int) -> str:
    end = data.index(b"\0", at)
    return data[at:end].decode()
