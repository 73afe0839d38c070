// The start-up check of a topic's subject, for every registry format. Invariant: a spec starts on
// a topic only if every field it needs is in some version registered under the topic's subject,
// and no version gives a field a type that cannot hold it exactly (a float or double for a
// decimal); a refusal names the spec's YAML key, so a spec that would dead-letter a topic whole
// never starts.

package format

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/confluentinc/confluent-kafka-go/v2/schemaregistry"

	"github.com/relay-sh/relay/internal/spec"
)

// Errors of CheckSubject.
var (
	// ErrSpecUnreadable: the subject's schemas cannot give the spec a field.
	ErrSpecUnreadable = errors.New("the spec cannot be read from the subject's schemas")
	// ErrNoSubject: the registry has no schema under the subject yet (no producer registered one:
	// a start waits for it, as for a topic not created yet).
	ErrNoSubject = errors.New("the registry has no schema under the subject")
)

// subjectChecker is a registry format's start-up check: CheckSubject's error wraps
// ErrSpecUnreadable, ErrNoSubject, or ErrUnavailable (or ctx's error) when the registry could not
// be asked.
type subjectChecker interface {
	CheckSubject(ctx context.Context, subject string) error
}

// CheckTopics runs d's start-up check for each topic: for a registry format, its CheckSubject of
// the topic's subject under Confluent's TopicNameStrategy (<topic>-value); JSON has nothing to
// check.
func CheckTopics(ctx context.Context, d Decoder, topics []string) error {
	c, ok := d.(subjectChecker)
	if !ok {
		return nil
	}
	for _, t := range topics {
		if err := c.CheckSubject(ctx, t+"-value"); err != nil {
			return fmt.Errorf("topic %s: %w", t, err)
		}
	}
	return nil
}

// verdict is what one writer schema says of one spec field: OK, missing_field (the schema lacks
// it), or wrong_type with the writer's type that cannot hold it (found); err, when the schema
// cannot be followed to the field at all (a reference relay does not follow), which counts as
// having it, refused once for that.
type verdict struct {
	reason spec.Reason
	found  string
	err    error
}

// checkSubject asks the registry for the versions under subject and checks them (checkVersions).
func checkSubject(ctx context.Context, reg *Registry, fields []spec.InputField, subject string,
	resolve func(schemaregistry.SchemaMetadata) ([]verdict, error)) error {
	versions, err := reg.Versions(ctx, subject)
	if err != nil {
		return err
	}
	return checkVersions(fields, subject, versions, resolve)
}

// checkVersions resolves fields against every version with resolve (a version resolve cannot read
// at all is a problem too) and says what no version gives, and what some version gives in a type
// that cannot hold it.
func checkVersions(fields []spec.InputField, subject string, versions []schemaregistry.SchemaMetadata,
	resolve func(schemaregistry.SchemaMetadata) ([]verdict, error)) error {
	if len(versions) == 0 {
		return fmt.Errorf("%w: %s", ErrNoSubject, subject)
	}
	var problems []error
	has := make([]bool, len(fields)) // some version has the field, of whatever type
	for _, v := range versions {
		at := fmt.Sprintf("%s version %d (id %d)", subject, v.Version, v.ID)
		verdicts, err := resolve(v)
		if errors.Is(err, ErrUnavailable) {
			return err // a reference the registry could not give now: the start waits and asks again
		}
		if err != nil {
			problems = append(problems, fmt.Errorf("%s: %w", at, err))
			continue
		}
		for i, f := range verdicts {
			path := strings.Join(fields[i].Path, ".")
			has[i] = has[i] || f.reason != spec.ReasonMissingField || f.err != nil
			switch {
			case f.err != nil:
				problems = append(problems, fmt.Errorf("%s: %s at %s: %w", fields[i].Key, at, path, f.err))
			case f.reason == spec.ReasonWrongType:
				problems = append(problems, fmt.Errorf("%s: %s has %s at %s, which cannot hold %s exactly",
					fields[i].Key, at, f.found, path, fields[i].Kind))
			}
		}
	}
	for i, ok := range has {
		if !ok {
			problems = append(problems, fmt.Errorf("%s: no version of %s has %s", fields[i].Key, subject, strings.Join(fields[i].Path, ".")))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %w", ErrSpecUnreadable, errors.Join(problems...))
	}
	return nil
}
