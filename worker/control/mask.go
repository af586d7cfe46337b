package control

import (
	"fmt"
	"strings"

	"github.com/irs-sim/irs/internal/field"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// applyMask copies the fields named by paths ("serve.delay", "calls") from src into dst. A named field that src
// leaves unset is cleared in dst. Every path is checked; the error lists the ones that name no field.
func applyMask(dst, src proto.Message, paths []string) error {
	var errs field.List
	for i, p := range paths {
		if err := copyPath(dst.ProtoReflect(), src.ProtoReflect(), strings.Split(p, ".")); err != nil {
			errs.Add(field.Index("update_mask.paths", i), err)
		}
	}
	return errs.Err()
}

func copyPath(dst, src protoreflect.Message, path []string) error {
	fd := dst.Descriptor().Fields().ByName(protoreflect.Name(path[0]))
	if fd == nil {
		return fmt.Errorf("no field %q in %s", path[0], dst.Descriptor().Name())
	}
	if len(path) == 1 {
		if src.Has(fd) {
			dst.Set(fd, src.Get(fd))
		} else {
			dst.Clear(fd)
		}
		return nil
	}
	if fd.Kind() != protoreflect.MessageKind || fd.IsList() || fd.IsMap() {
		return fmt.Errorf("%s is not a message: a path cannot go inside it", fd.Name())
	}
	// An unset message field reads as an empty, read-only message: copying from it clears.
	return copyPath(dst.Mutable(fd).Message(), src.Get(fd).Message(), path[1:])
}
