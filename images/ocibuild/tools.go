//go:build tools

// actionlint, pinned with the image builder: images/check.sh lints .github/workflows with it.
package main

import _ "github.com/rhysd/actionlint/cmd/actionlint"
