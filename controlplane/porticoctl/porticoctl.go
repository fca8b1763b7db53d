// Package porticoctl is the operator CLI's command tree. Each command
// group lives in a file of its own; main only executes Root.
package porticoctl

import (
	"io"

	"github.com/spf13/cobra"
)

// Root returns the porticoctl command tree writing to out.
func Root(out io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:           "porticoctl",
		Short:         "Operate a Portico platform",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(out)
	root.AddCommand(certsCommand())
	return root
}
