package main

import (
	"os"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Every command the CLI runs, and every flag of it, is in docs/cli.md: the command's whole path
// (`eventq tenant list`) and each flag as `--name`.
func TestCLIDocumentsEveryCommandAndFlag(t *testing.T) {
	doc, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	var walk func(cmd *cobra.Command)
	walk = func(cmd *cobra.Command) {
		for _, sub := range cmd.Commands() {
			if sub.Hidden || sub.Name() == "help" || sub.Name() == "completion" {
				continue
			}
			if !sub.HasSubCommands() {
				path := sub.CommandPath()
				if !strings.Contains(text, path+" ") && !strings.Contains(text, path+"\n") {
					t.Errorf("docs/cli.md does not show %q", path)
				}
				sub.Flags().VisitAll(func(f *pflag.Flag) {
					if f.Name != "help" && !strings.Contains(text, "--"+f.Name) {
						t.Errorf("docs/cli.md does not show %s's --%s", path, f.Name)
					}
				})
			}
			walk(sub)
		}
	}
	walk((&cli{}).rootCommand())
}
