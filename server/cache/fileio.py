"""The one seam through which the cache writes, renames, copies and removes files.

What this is: thin wrappers over os calls with fsync, so a test can inject a full disk (ENOSPC)
or an I/O error in exactly one place by subclassing `FileIO`. What this is not: a cache level; it
knows nothing about entries, budgets or file names.
"""

from __future__ import annotations

import errno
import os
from typing import BinaryIO


class FileIO:
    """Real file operations. Subclass and override `write` to inject faults."""

    def open_new(self, path: str) -> BinaryIO:
        return open(path, "wb")

    def write(self, f: BinaryIO, data: bytes | memoryview) -> None:
        f.write(data)

    def sync_close(self, f: BinaryIO) -> None:
        try:
            f.flush()
            os.fsync(f.fileno())
        finally:
            f.close()

    def rename(self, src: str, dst: str) -> None:
        os.replace(src, dst)

    def same_volume(self, src: str, dst_folder: str) -> bool:
        try:
            return os.stat(src).st_dev == os.stat(dst_folder).st_dev
        except OSError:
            return False

    def copy(self, src: str, dst: str, piece_bytes: int = 16 << 20) -> None:
        """Copy through `write` (so faults apply), fsync, no rename (the caller renames)."""
        with open(src, "rb") as fin:
            f = self.open_new(dst)
            try:
                while True:
                    piece = fin.read(piece_bytes)
                    if not piece:
                        break
                    self.write(f, piece)
            finally:
                self.sync_close(f)

    def remove(self, path: str) -> None:
        """Remove a file; nothing when there is none, nor when a folder stands in its place (the cache
        deletes only what it wrote; the next index skips the folder as an orphan and says so)."""
        try:
            os.remove(path)
        except FileNotFoundError:
            pass
        except OSError:   # IsADirectoryError; PermissionError on Windows
            if not os.path.isdir(path):
                raise

    def sync_folder(self, folder: str) -> None:
        if not hasattr(os, "O_DIRECTORY"):
            return  # Windows: no directory fsync
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


class FullDiskIO(FileIO):
    """A FileIO whose disk holds `capacity` more bytes, then every write fails with ENOSPC."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.written = 0

    def write(self, f: BinaryIO, data: bytes | memoryview) -> None:
        if self.written + len(data) > self.capacity:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.written += len(data)
        super().write(f, data)


def move_file(io: FileIO, src: str, dst: str) -> str:
    """Move `src` to `dst`: a rename on one volume, a copy across volumes (the caller deletes the
    source once the move is committed, so a failure later can still be undone).

    Returns "rename" or "copy". On failure nothing is left at `dst` and `src` is untouched.
    """
    folder = os.path.dirname(dst) or "."
    if io.same_volume(src, folder):
        io.rename(src, dst)
        return "rename"
    tmp = dst + ".tmp"
    try:
        io.copy(src, tmp)
        io.rename(tmp, dst)
    except BaseException:
        io.remove(tmp)
        raise
    return "copy"
