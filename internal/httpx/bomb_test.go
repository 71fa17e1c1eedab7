package httpx

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"testing"
)

// The decode bombs are files, testdata/bomb.CODING: compressing 50 MiB five times takes a
// second, and most of a minute under the race detector. To write them again:
//
//	go test ./internal/httpx -run TestBombsDecodeToMoreThanARequestMayCost -bombs.write
var writeBombs = flag.Bool("bombs.write", false, "write testdata/bomb.* again from encode")

// bombSize is what every bomb decodes to: more than the 24 MiB of decoder window a request
// may cost, so a server that decoded a bomb whole would fail TestDecodeBombsCostTheLimitNotTheirSize.
const bombSize = 50 << 20

// bomb is 50 MiB of zeros in coding: tens of kilobytes sent.
func bomb(t testing.TB, coding string) []byte {
	t.Helper()
	b, err := os.ReadFile(bombPath(coding))
	if err != nil {
		t.Fatalf("%v (write it with -bombs.write)", err)
	}
	return b
}

func bombPath(coding string) string { return filepath.Join("testdata", "bomb."+coding) }

// Every bomb decodes, with the service's own decoder, to more than 32 MiB: more than the 24 MiB
// of decoder window a request may cost. (Decoding the whole 50 MiB takes 14 s under the race
// detector, 32 MiB half of that.)
func TestBombsDecodeToMoreThanARequestMayCost(t *testing.T) {
	out := bytes.NewBuffer(make([]byte, 0, 32<<20+64<<10)) // one buffer, grown once
	for _, c := range codingsDecoded {
		if *writeBombs {
			if err := os.WriteFile(bombPath(c.name), encode(t, c.name, make([]byte, bombSize)), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		out.Reset()
		if _, err := decode(bomb(t, c.name), c.header, 32<<20, out); !errors.Is(err, ErrTooLarge) {
			t.Fatalf("%s: %v, want ErrTooLarge", c.name, err)
		}
	}
}
