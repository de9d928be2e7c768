package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"
	v1 "k8s.io/api/core/v1"
	utilexec "k8s.io/client-go/util/exec"

	"github.com/nodelet/nodelet/internal/serve/cli"
	"github.com/nodelet/nodelet/internal/serve/server"
)

// clientFlags are the flags of the commands that talk to a running
// nodelet's API with the local admin credentials it wrote at start.
type clientFlags struct {
	rootDir   *string
	server    string
	namespace string
	timeout   time.Duration
}

func (f *clientFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.server, "server", cli.DefaultServer, "nodelet API to talk to")
	cmd.Flags().StringVarP(&f.namespace, "namespace", "n", "default", "Namespace of the pod")
	cmd.Flags().DurationVar(&f.timeout, "timeout", cli.DefaultTimeout, "Request timeout")
}

func (f *clientFlags) client() (*cli.Client, error) {
	dir := server.PKIDir(*f.rootDir)
	admin, err := server.AdminCredentials(dir)
	if err != nil {
		return nil, fmt.Errorf("no admin credentials in %s: has nodelet run with --root-dir %s?", dir, *f.rootDir)
	}
	return cli.NewClient(cli.Config{Server: f.server, Timeout: f.timeout, Warnings: os.Stderr,
		CAFile: server.ServingCertPath(dir), CertFile: admin.ClientCert, KeyFile: admin.ClientKey,
		TrustHint: "pass the --root-dir that nodelet runs with, or the --server of the nodelet that uses " + *f.rootDir})
}

// findPod returns the pod named name in the flags' namespace.
func (f *clientFlags) findPod(ctx context.Context, c *cli.Client, name string) (*v1.Pod, error) {
	pods, err := c.Pods(ctx)
	if err != nil {
		return nil, err
	}
	for i := range pods {
		if pods[i].Namespace == f.namespace && pods[i].Name == name {
			return &pods[i], nil
		}
	}
	return nil, fmt.Errorf("pod %s/%s not found", f.namespace, name)
}

// pod connects and finds the named pod.
func (f *clientFlags) pod(ctx context.Context, name string) (*cli.Client, *v1.Pod, error) {
	c, err := f.client()
	if err != nil {
		return nil, nil, err
	}
	pod, err := f.findPod(ctx, c, name)
	return c, pod, err
}

func newClientCommands(rootDir *string) []*cobra.Command {
	return []*cobra.Command{newGetCommand(rootDir), newDescribeCommand(rootDir), newLogsCommand(rootDir), newEventsCommand(rootDir),
		newExecCommand(rootDir), newPortForwardCommand(rootDir)}
}

func newGetCommand(rootDir *string) *cobra.Command {
	f := &clientFlags{rootDir: rootDir}
	var output string
	var watch bool
	cmd := &cobra.Command{
		Use:           "get pods",
		Short:         "List the node's pods (as kubectl get pods)",
		Args:          cobra.ExactArgs(1),
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := podResource(args[0]); err != nil {
				return err
			}
			c, err := f.client()
			if err != nil {
				return err
			}
			if watch {
				return cli.WatchPods(cmd.Context(), c, cmd.OutOrStdout(), 0, output)
			}
			pods, err := c.Pods(cmd.Context())
			if err != nil {
				return err
			}
			return cli.PrintPods(cmd.OutOrStdout(), pods, output, time.Now())
		},
	}
	f.add(cmd)
	cmd.Flags().StringVarP(&output, "output", "o", "", "Output format: wide, yaml or json")
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "Keep printing changes")
	return cmd
}

func newDescribeCommand(rootDir *string) *cobra.Command {
	f := &clientFlags{rootDir: rootDir}
	cmd := &cobra.Command{
		Use:           "describe pod NAME",
		Short:         "Show a pod in detail, with its events and start-up timeline",
		Args:          cobra.ExactArgs(2),
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := podResource(args[0]); err != nil {
				return err
			}
			c, pod, err := f.pod(cmd.Context(), args[1])
			if err != nil {
				return err
			}
			evs, err := c.Events(cmd.Context())
			if err != nil {
				return err
			}
			return cli.Describe(cmd.OutOrStdout(), *pod, evs, time.Now())
		},
	}
	f.add(cmd)
	return cmd
}

func newLogsCommand(rootDir *string) *cobra.Command {
	f := &clientFlags{rootDir: rootDir}
	var container string
	var opts cli.LogOptions
	var tail int64
	cmd := &cobra.Command{
		Use:           "logs POD",
		Short:         "Print a container's log (as kubectl logs)",
		Args:          cobra.ExactArgs(1),
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, pod, err := f.pod(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			name, err := pickContainer(pod, container)
			if err != nil {
				return err
			}
			if cmd.Flags().Changed("tail") {
				opts.TailLines = &tail
			}
			return c.Logs(cmd.Context(), pod.Namespace, pod.Name, name, opts, cmd.OutOrStdout())
		},
	}
	f.add(cmd)
	cmd.Flags().StringVarP(&container, "container", "c", "", "Container (needed when the pod has several)")
	cmd.Flags().BoolVarP(&opts.Follow, "follow", "f", false, "Follow the log")
	cmd.Flags().BoolVarP(&opts.Previous, "previous", "p", false, "The previous instance's log")
	cmd.Flags().BoolVar(&opts.Timestamps, "timestamps", false, "Prefix each line with its time")
	cmd.Flags().Int64Var(&tail, "tail", -1, "Lines from the end to show")
	return cmd
}

func newEventsCommand(rootDir *string) *cobra.Command {
	f := &clientFlags{rootDir: rootDir}
	cmd := &cobra.Command{
		Use:           "events",
		Short:         "List the node's recent events (about its pods and itself)",
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := f.client()
			if err != nil {
				return err
			}
			evs, err := c.Events(cmd.Context())
			if err != nil {
				return err
			}
			return cli.PrintEvents(cmd.OutOrStdout(), evs)
		},
	}
	f.add(cmd)
	return cmd
}

func newExecCommand(rootDir *string) *cobra.Command {
	f := &clientFlags{rootDir: rootDir}
	var container string
	var stdin, tty bool
	cmd := &cobra.Command{
		Use:           "exec [-i] [-t] POD [-c CONTAINER] -- COMMAND [ARGS...]",
		Short:         "Run a command in a container (as kubectl exec)",
		Args:          cobra.MinimumNArgs(2),
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.ArgsLenAtDash() != 1 {
				return fmt.Errorf("usage: nodelet exec POD -- COMMAND [ARGS...]")
			}
			c, pod, err := f.pod(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			name, err := pickContainer(pod, container)
			if err != nil {
				return err
			}
			var in io.Reader
			if stdin {
				in = cmd.InOrStdin()
			}
			if tty && stdin {
				// A terminal session: keys go to the remote terminal as typed.
				if f, ok := in.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
					state, err := term.MakeRaw(int(f.Fd()))
					if err != nil {
						return fmt.Errorf("put the terminal in raw mode: %w", err)
					}
					defer term.Restore(int(f.Fd()), state)
				}
			}
			err = c.Exec(cmd.Context(), pod.Namespace, pod.Name, name, args[1:], in, cmd.OutOrStdout(), cmd.ErrOrStderr(), tty)
			var exitErr utilexec.CodeExitError
			if errors.As(err, &exitErr) {
				return exitCodeError{code: exitErr.Code}
			}
			return err
		},
	}
	f.add(cmd)
	cmd.Flags().StringVarP(&container, "container", "c", "", "Container (needed when the pod has several)")
	cmd.Flags().BoolVarP(&stdin, "stdin", "i", false, "Pass standard input to the command")
	cmd.Flags().BoolVarP(&tty, "tty", "t", false, "Allocate a terminal")
	return cmd
}

func newPortForwardCommand(rootDir *string) *cobra.Command {
	f := &clientFlags{rootDir: rootDir}
	cmd := &cobra.Command{
		Use:           "port-forward POD LOCAL:REMOTE [LOCAL:REMOTE...]",
		Short:         "Forward local ports on 127.0.0.1 to a pod (as kubectl port-forward)",
		Args:          cobra.MinimumNArgs(2),
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, pod, err := f.pod(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return c.PortForward(cmd.Context(), pod.Namespace, pod.Name, args[1:], nil, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f.add(cmd)
	return cmd
}

// pickContainer is the named container, or the pod's only one.
func pickContainer(pod *v1.Pod, name string) (string, error) {
	if name != "" {
		return name, nil
	}
	if len(pod.Spec.Containers) != 1 {
		return "", fmt.Errorf("pod %s/%s has %d containers: choose one with -c", pod.Namespace, pod.Name, len(pod.Spec.Containers))
	}
	return pod.Spec.Containers[0].Name, nil
}

// exitCodeError carries a remote command's exit code to main.
type exitCodeError struct{ code int }

func (e exitCodeError) Error() string { return fmt.Sprintf("command exited with %d", e.code) }

// podResource accepts the names kubectl takes for pods.
func podResource(name string) error {
	switch name {
	case "pod", "pods", "po":
		return nil
	}
	return fmt.Errorf("unknown resource %q: nodelet serves pods", name)
}
