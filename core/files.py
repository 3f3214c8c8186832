"""Writing files: whole or not at all, and the user's write errors as one sentence naming the path.

A full disk, a folder without write permission and a read-only file system are the user's
problems, not the workbench's: `write_error` turns them into a WorkbenchError ("cannot write
out/m.onnx: the disk is full (needs 12 MB, 1 MB free)."), whatever reports them: an OSError, or a
tool's failure with the system's text inside (the linker's "No space left on device"). Every
writer goes through it (model saves, the artifact, autosaves, tuning records, dump folders), and
the CLI and the GUI's jobs map any such OSError that escapes with `user_error`.

`atomic_write` writes through a temporary file beside the target and renames it over the target,
so a kill leaves the old file or the new one. Temporary files are named by `temporary_name`
(".NAME.PID-TOKEN.tmp": the writer's process id is in the name), and `remove_stale_temporaries`
removes those whose writer is gone, at the next save to the folder: only names this scheme made.
"""
from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import secrets
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from .errors import WorkbenchError

__all__ = ["atomic_write", "check_space", "check_writable", "describe_size", "free_bytes", "fsync_folder", "is_temporary_name",
           "new_folders", "remove_stale_temporaries", "temporary_name", "user_errno", "user_error", "write_error", "write_temporary",
           "writing"]

logger = logging.getLogger(__name__)

# errno -> what it means for a write, as a clause of the sentence
_REASONS = {
    errno.ENOSPC: "the disk is full",
    errno.EDQUOT: "the disk quota is used up",
    errno.EROFS: "the file system is read-only",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
    errno.EFBIG: "the file is too big for the file system",
    errno.ENAMETOOLONG: "the name is too long",
    errno.ENOTDIR: "a part of the path is a file, not a folder",
    errno.EISDIR: "it is a folder",
}
# what a tool (the linker, TVM) prints for them: found in the text of its failure
_TEXT_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES)
_SPACE_ERRNOS = (errno.ENOSPC, errno.EDQUOT)

_TEMP = re.compile(r"^\.(?P<name>.+)\.(?P<pid>\d+)-[0-9a-f]{8}\.tmp$")
# what save_model's tempfile.mkstemp made before this scheme: no process id, so only old ones go
_LEGACY_TEMP = re.compile(r"^\..+\.onnx\.[a-z0-9_]{8}\.tmp$")
LEGACY_TEMP_AGE_S = 3600.0


def user_errno(exc: BaseException, *, text: bool = True) -> int | None:
    """The errno of a user's write problem behind `exc` (an OSError, or with `text` a tool's
    failure whose text carries the system's message, in it or in its causes), or None when it is
    not one."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno in _REASONS:
            return e.errno
        if text:
            message = str(e)
            for code in _TEXT_ERRNOS:
                if os.strerror(code) in message:
                    return code
        e = e.__cause__ or e.__context__
    return None


def describe_size(n: int) -> str:
    """Bytes for a sentence: '312 bytes', '48 kB', '1.5 MB', '12 MB', '2.1 GB' (powers of 1000)."""
    if n < 1000:
        return f"{n} byte{'s' if n != 1 else ''}"
    for unit, scale in (("kB", 1e3), ("MB", 1e6), ("GB", 1e9), ("TB", 1e12)):
        value = n / scale
        if value < 999.5 or unit == "TB":
            digits = f"{value:.1f}".removesuffix(".0") if value < 9.95 else f"{value:.0f}"
            return f"{digits} {unit}"
    return f"{n} bytes"  # pragma: no cover - the loop returns


def _existing(path: Path) -> Path:
    """`path`, or the nearest folder above it that exists (what a write there will land on)."""
    p = Path(os.path.abspath(path))
    while not p.exists() and p.parent != p:
        p = p.parent
    return p


def free_bytes(path: str | os.PathLike) -> int | None:
    """Bytes a write at `path` can still use (for root, the blocks reserved for root too); None
    when the file system does not say."""
    try:
        st = os.statvfs(_existing(Path(path)))
    except OSError:
        return None
    if st.f_blocks == 0:  # a file system without blocks (sysfs, procfs): it says nothing of space
        return None
    blocks = st.f_bfree if os.geteuid() == 0 else st.f_bavail
    return blocks * st.f_frsize


def _free_inodes(path: str | os.PathLike) -> int | None:
    try:
        st = os.statvfs(_existing(Path(path)))
    except OSError:
        return None
    if st.f_files == 0:  # the file system does not count them (btrfs, some network ones)
        return None
    return st.f_ffree if os.geteuid() == 0 else st.f_favail


def write_error(path: str | os.PathLike, exc: BaseException, needed: int | None = None) -> WorkbenchError | None:
    """The one sentence for a failed write of `path` when the user can fix its cause (full disk,
    permission, read-only file system, ...), naming what was needed and what is free where that is
    known; None when `exc` is something else (an internal error: let it go on as it is)."""
    if isinstance(exc, WorkbenchError):
        return exc
    code = user_errno(exc)
    if code is None:
        return None
    reason = _REASONS[code]
    if code in _SPACE_ERRNOS:
        free = free_bytes(path)
        if code == errno.ENOSPC and (_free_inodes(path) == 0 or (needed is not None and free is not None and free >= needed)):
            # the bytes would fit: the file system ran out of files (inodes) or of whole blocks
            return WorkbenchError(f"cannot write {path}: the file system is out of room ({describe_size(free or 0)} free, "
                                  "but no more files or blocks for this one).")
        if needed is not None and free is not None:
            reason += f" (needs {describe_size(needed)}, {describe_size(free)} free)"
        elif free is not None:
            reason += f" ({describe_size(free)} free)"
    return WorkbenchError(f"cannot write {path}: {reason}.")


def user_error(exc: BaseException) -> WorkbenchError | None:
    """The sentence for an OSError (itself or a cause) that escaped where the path was not known
    (the CLI's and the GUI's last resort), naming the file it names; None for anything else. Only
    the errno counts here, never an error's text, and a cause that may be a read says "use"."""
    e: BaseException | None = exc
    while e is not None and not (isinstance(e, OSError) and e.errno in _REASONS):
        e = e.__cause__ or e.__context__
    if e is None:
        return None
    verb = "write" if e.errno in (*_SPACE_ERRNOS, errno.EROFS, errno.EFBIG) else "use"
    if e.filename is None:
        return WorkbenchError(f"cannot {verb} a file: {_REASONS[e.errno]}.")
    if verb == "write":
        return write_error(e.filename, e)
    return WorkbenchError(f"cannot {verb} {e.filename}: {_REASONS[e.errno]}.")


@contextlib.contextmanager
def writing(path: str | os.PathLike, needed: int | None = None) -> Iterator[None]:
    """Within it, a user's write problem (see `write_error`) is raised as its WorkbenchError
    naming `path`; anything else passes unchanged."""
    try:
        yield
    except WorkbenchError:
        raise
    except Exception as e:  # noqa: BLE001 - translated when it is the user's, re-raised as it is otherwise
        better = write_error(path, e, needed)
        if better is None:
            raise
        raise better from e


@contextlib.contextmanager
def new_folders(folder: str | os.PathLike, named: str | os.PathLike | None = None) -> Iterator[None]:
    """Create `folder` and the folders above it that are missing; when the block raises, remove
    those it created again (if still empty), so a failed write leaves no empty folder behind.
    A folder that cannot be made is `write_error`'s sentence naming `named` (the file the folder
    is made for), else the folder."""
    made = []
    p = Path(os.path.abspath(folder))
    while not p.exists() and p.parent != p:
        made.append(p)
        p = p.parent
    try:
        with writing(named if named is not None else folder):
            Path(folder).mkdir(parents=True, exist_ok=True)
        yield
    except BaseException:
        for d in made:  # deepest first
            with contextlib.suppress(OSError):
                d.rmdir()
        raise


def check_space(path: str | os.PathLike, needed: int) -> None:
    """Refuse, before anything is written, a write of `needed` bytes that cannot fit where `path` goes."""
    free = free_bytes(path)
    if free is not None and needed > free:
        raise WorkbenchError(f"cannot write {path}: the disk is full (needs {describe_size(needed)}, {describe_size(free)} free).")


def check_writable(path: str | os.PathLike, needed: int | None = None) -> None:
    """Refuse early (before a long compile) a target that cannot be written: a read-only file
    system, a folder without write permission, or (with `needed`) too little space."""
    where = _existing(Path(path))
    folder = where if where.is_dir() else where.parent
    try:
        st = os.statvfs(folder)
    except OSError:
        return
    if st.f_flag & os.ST_RDONLY:
        raise WorkbenchError(f"cannot write {path}: {_REASONS[errno.EROFS]}.")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise WorkbenchError(f"cannot write {path}: {_REASONS[errno.EACCES]}.")
    if needed is not None:
        check_space(path, needed)


def temporary_name(path: str | os.PathLike) -> Path:
    """A name beside `path` for writing it before the rename: '.NAME.PID-TOKEN.tmp'."""
    p = Path(path)
    return p.with_name(f".{p.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")


def is_temporary_name(name: str) -> bool:
    """Whether a file name is one `temporary_name` makes."""
    return _TEMP.match(name) is not None


def _process_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # PermissionError: someone else's process
        return True
    return True


def remove_stale_temporaries(folder: str | os.PathLike) -> list[Path]:
    """Remove the temporary files a killed writer left in `folder`: names `temporary_name` made
    whose process is gone, and the older scheme's ('.NAME.onnx.XXXXXXXX.tmp') when over an hour
    old. Returns what was removed; a file that cannot be removed is left (and logged)."""
    removed = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    now = time.time()
    for entry in entries:
        m = _TEMP.match(entry.name)
        try:
            if not entry.is_file(follow_symlinks=False):
                continue
            if m is not None:
                stale = not _process_alive(int(m.group("pid")))
            else:
                stale = _LEGACY_TEMP.match(entry.name) is not None and now - entry.stat().st_mtime > LEGACY_TEMP_AGE_S
            if stale:
                os.unlink(entry.path)
                removed.append(Path(entry.path))
        except FileNotFoundError:
            continue
        except OSError as e:
            logger.warning("cannot remove the stale temporary file %s: %s", entry.path, e)
    if removed:
        logger.info("removed %d temporary file(s) a killed save left in %s", len(removed), folder)
    return removed


def fsync_folder(folder: str | os.PathLike) -> None:
    """Make a rename in `folder` durable (a power cut after it keeps it); a no-op where the file
    system cannot sync a folder."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _new_file_mode(path: Path) -> int:
    """The mode a plain open() would give a new `path`, or the mode of the file it replaces."""
    try:
        return path.stat().st_mode & 0o777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def write_temporary(path: Path, data: bytes | Callable[[BinaryIO], None]) -> Path:
    """Write `data` (bytes, or a function writing to the open file) to a temporary name beside
    `path`, synced to disk; returns that name. A failure removes it and raises the error as it
    came: the caller, once it has removed what else it wrote, says it (`writing`), so the free
    space it names is what is free then."""
    tmp = temporary_name(path)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            if callable(data):
                data(f)
            else:
                f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, _new_file_mode(path))
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return tmp


def atomic_write(path: str | os.PathLike, data: bytes | Callable[[BinaryIO], None], *, needed: int | None = None) -> None:
    """Write `path` whole or not at all: a temporary file beside it, synced, renamed over it.

    Stale temporaries of killed writers in the folder go first; a write known not to fit
    (`needed` bytes, or len(data)) is refused before it starts. Errors the user can fix are one
    sentence naming `path` (`write_error`); nothing is left behind on failure, not even a folder
    this made."""
    p = Path(path)
    if needed is None and isinstance(data, (bytes, bytearray, memoryview)):
        needed = len(data)
    with new_folders(p.parent, named=p):
        remove_stale_temporaries(p.parent)
        if needed is not None:
            check_space(p, needed)
        with writing(p, needed):
            tmp = write_temporary(p, data)
            try:
                os.replace(tmp, p)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
    fsync_folder(p.parent)
