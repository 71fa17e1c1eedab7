package tracking

import (
	"testing"

	"github.com/eventq/eventq/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }
