package bus

import (
	"errors"

	"github.com/scanplane/scanplane/tablets"
)

// IsNotFound reports whether err is a not-found error of any metadata or
// block backend: this package's stores or tablets' directory stores.
func IsNotFound(err error) bool {
	return errors.Is(err, ErrNotFound) || errors.Is(err, tablets.ErrNotFound)
}
