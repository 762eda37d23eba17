//go:build tools

// SeaweedFS's `weed` binary: a real S3-compatible server (Apache-2.0) that the tests use as a
// self-managed Pulumi state backend (s3://...). Pinned by this module's go.mod/go.sum.
package tools

import _ "github.com/seaweedfs/seaweedfs/weed"
