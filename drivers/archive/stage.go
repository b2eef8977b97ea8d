package archive

import (
	"context"
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/mesh-host/mesh-host/drivers"
)

// replace fetches and checks the archive, unpacks it into a staging
// directory beside base in dir, and puts it in base's place. On any error
// before the rename, base is as it was and nothing is left behind.
func (d *Driver) replace(ctx context.Context, dir *os.File, base string, s *drivers.ArchiveSpec) error {
	dfd := int(dir.Fd())
	archive, err := d.fetch(ctx, dfd, base, s)
	if err != nil {
		return err
	}
	defer archive.Close()

	stage := tempName(base, "stage")
	if err := unix.Mkdirat(dfd, stage, 0o700); err != nil {
		return fmt.Errorf("make staging directory: %w", err)
	}
	committed := false
	defer func() {
		if !committed {
			_ = removeTree(context.Background(), dfd, stage)
		}
	}()
	sfd, err := unix.Openat(dfd, stage, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open staging directory: %w", err)
	}
	sdir := os.NewFile(uintptr(sfd), stage)
	defer sdir.Close()

	u := &unpacker{ctx: ctx, stage: sfd, format: s.Format, maxBytes: d.opts.MaxBytes, maxEntries: d.opts.MaxEntries}
	if err := u.unpack(archive); err != nil {
		return err
	}
	if err := writeFileAt(sfd, DigestFile, []byte(s.Digest+"\n"), 0o644); err != nil {
		return err
	}
	if err := unix.Fchmod(sfd, 0o755); err != nil {
		return fmt.Errorf("chmod staging directory: %w", err)
	}
	// One flush makes the whole tree durable before its name is.
	if err := syncFS(sdir); err != nil {
		return fmt.Errorf("sync: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	old, err := commit(dfd, stage, base)
	if err != nil {
		return err
	}
	committed = true
	_ = dir.Sync()
	err = d.markArrival(dfd, base)
	if old != "" {
		// Left behind on failure, the old tree goes with the next sweep.
		_ = removeTree(context.Background(), dfd, old)
	}
	return err
}

// renameAside renames base in dirfd aside, then stage to base, and
// returns the name the old base went to ("" when there was none). If the
// second rename fails, the old base is put back.
func renameAside(dirfd int, stage, base string) (old string, err error) {
	old = tempName(base, "old")
	if err := unix.Renameat(dirfd, base, dirfd, old); err != nil {
		if !errors.Is(err, unix.ENOENT) {
			return "", fmt.Errorf("rename old tree aside: %w", err)
		}
		old = ""
	}
	if err := unix.Renameat(dirfd, stage, dirfd, base); err != nil {
		if old != "" {
			_ = unix.Renameat(dirfd, old, dirfd, base)
		}
		return "", fmt.Errorf("rename into place: %w", err)
	}
	return old, nil
}
