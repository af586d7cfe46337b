// Package memtrim drops a process's cold executable pages from its resident set.
//
// A Go binary runs every package's initialisation at start: code and read-only data that is touched once and
// never again, but that the kernel keeps mapped (with read-around, whole neighbourhoods of it), so a worker
// that idles looks many megabytes bigger than what it uses. Those pages are read-only views of the executable
// file: telling the kernel the process no longer needs them (MADV_DONTNEED) unmaps them; if code there runs
// again, it is mapped back from the page cache. Writable mappings are never touched.
package memtrim

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Executable releases the resident read-only pages of the running executable. It returns how many bytes of
// mappings it advised.
func Executable() (int64, error) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return 0, fmt.Errorf("find executable: %w", err)
	}
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var total int64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// start-end perms offset dev inode path
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || fields[5] != exe || strings.Contains(fields[1], "w") {
			continue
		}
		start, end, ok := strings.Cut(fields[0], "-")
		if !ok {
			continue
		}
		lo, err1 := strconv.ParseUint(start, 16, 64)
		hi, err2 := strconv.ParseUint(end, 16, 64)
		if err1 != nil || err2 != nil || hi <= lo {
			continue
		}
		if err := madvise(uintptr(lo), uintptr(hi-lo)); err != nil {
			return total, fmt.Errorf("madvise %s: %w", fields[0], err)
		}
		total += int64(hi - lo)
	}
	return total, sc.Err()
}

func madvise(addr, length uintptr) error {
	_, _, errno := unix.Syscall(unix.SYS_MADVISE, addr, length, unix.MADV_DONTNEED)
	if errno != 0 {
		return errno
	}
	return nil
}
