package broker

import (
	"runtime/debug"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/persistence"
)

// Release is this release of Queen (Config.Version's default; `queen
// --version`).
const Release = "0.6.13"

// Revision is the VCS revision this binary was built from (the build's
// vcs.revision), with "+dirty" when the work tree had local changes
// (vcs.modified), or "unknown" when the build recorded none (go run, test
// binaries, -buildvcs=false, a build outside a repository).
func Revision() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	return revisionOf(info.Settings)
}

func revisionOf(settings []debug.BuildSetting) string {
	rev, dirty := "", false
	for _, s := range settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "unknown"
	}
	if dirty {
		rev += "+dirty"
	}
	return rev
}

// BuildOf is what a broker of release (and this binary's Revision) advertises
// of itself (SPEC.md §2): the schema version and layout generation are this
// binary's own (persistence.SchemaVersion, persistence.LayoutGeneration).
func BuildOf(release string) queen.Build {
	return queen.Build{Release: release, Revision: Revision(), Schema: persistence.SchemaVersion(), Layout: persistence.LayoutGeneration()}
}
