//go:build tools

// The programs this module builds (see go.mod).
package tools

import (
	_ "github.com/taskcluster/taskcluster/v97/clients/client-shell"
	_ "github.com/taskcluster/taskcluster/v97/workers/generic-worker"
)
