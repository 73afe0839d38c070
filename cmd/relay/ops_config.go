// relay config check: the configuration validated offline, every error at once, and the
// configuration relay runs with.
//
// Invariant: config check dials nothing, and checks exactly what every other command checks
// before it dials (loadConfig): a configuration it accepts is one relay run and preflight accept.

package main

import (
	"context"
	"fmt"
	"os"
)

const configUsage = `usage: relay config check [--config FILE] [--instance i/M]

Run 'relay config check --help' for details.
`

const configCheckAbout = `Loads the configuration as relay run does (the file, then RELAY_* variables, then --instance) and
validates it without connecting to anything. Every error is reported at once, each naming its key
(YAML path and variable), e.g.
  config kafka.start_offset (RELAY_START_OFFSET): "x" is not earliest or latest
and the command exits 2. A valid configuration is printed as YAML, every key with the value relay
runs with (defaults included), passwords masked: in mysql.dsn and mysql.ledger_dsn, and in
kafka.properties (sasl.password, also when read from kafka.sasl_password_file, and any other
password, secret or private key). relay.example.yaml lists every key with its default; relay
preflight runs these checks first, then the ones that need MySQL and Kafka.
`

func cmdConfig(ctx context.Context, args []string) error {
	return dispatch(ctx, "config", configUsage, args, subcommand{"check", cmdConfigCheck})
}

func cmdConfigCheck(_ context.Context, args []string) error {
	fs, src := opsFlags("config check", "[--config FILE] [--instance i/M]", configCheckAbout,
		`  cp relay.example.yaml relay.yaml && relay config check --config relay.yaml
  RELAY_MEMBERSHIP=group relay config check --config relay.yaml   # what a member would run with
`)
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Sprintf("config check: unexpected argument %q", fs.Arg(0))}
	}
	cfg, err := loadConfig(src)
	if err != nil {
		return err
	}
	out, err := cfg.EffectiveYAML()
	if err != nil {
		return err
	}
	fmt.Println("# valid: the configuration relay runs with (the file, then RELAY_* variables, then flags; passwords masked)")
	_, err = os.Stdout.Write(out)
	return err
}
