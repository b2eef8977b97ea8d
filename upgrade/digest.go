package upgrade

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
)

// FileDigest is the hex SHA-256 of the file at path: the name of the
// version an installed binary arrives as (the arrive script's), and the
// digest `--version` and the release tools show.
func FileDigest(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
