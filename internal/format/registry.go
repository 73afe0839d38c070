// The registry: writer schemas by id, through confluent-kafka-go's schemaregistry client.
// Invariant: an id is answered as unknown (ErrUnknownSchema) only after the registry itself said
// 40403 (schema not found) on every one of a bounded number of asks, so a record is dead-lettered as
// unknown_schema only for what the registry denies, never for a registry that is down, slow or
// failing (those are ErrUnavailable: wait and ask again).

package format

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/schemaregistry"
	"github.com/confluentinc/confluent-kafka-go/v2/schemaregistry/rest"
)

// Errors of Registry.Schema.
var (
	// ErrUnknownSchema: the registry has no schema of that id.
	ErrUnknownSchema = errors.New("unknown schema id")
	// ErrUnavailable: the registry could not be asked or did not answer the question.
	ErrUnavailable = errors.New("schema registry unavailable")
)

// The Confluent API's error_codes for an id, and a subject, it does not have.
const (
	codeSchemaNotFound  = 40403
	codeSubjectNotFound = 40401
)

// RegistryConfig says where the registry is and how to ask it.
type RegistryConfig struct {
	URL                string // the Confluent API's base, e.g. http://host:8081 or Apicurio's .../apis/ccompat/v7
	Username, Password string // basic auth, when Username is set
	// CAFile is the PEM of the CA(s) an https registry's certificate must chain to (empty: the
	// system's); CertFile and KeyFile a client certificate, for a registry that wants one.
	CAFile, CertFile, KeyFile string
	// CacheCapacity bounds the client's caches (schemas by id, among others); 0 means 1000.
	CacheCapacity int
	// RequestTimeout bounds one request; 0 means 10 s.
	RequestTimeout time.Duration
	// UnknownAsks is how many times an id is asked for before it is taken as unknown, UnknownWait
	// apart: a schema registered a moment ago may not have reached every registry replica (or
	// Apicurio's KafkaSQL store) yet. 0 means 3 asks, 1 s apart.
	UnknownAsks int
	UnknownWait time.Duration
	// UnknownFor is how long an id judged unknown stays so without asking again: a topic with many
	// records of an id the registry lost would otherwise cost every one of them UnknownAsks
	// requests. 0 means 1 minute.
	UnknownFor time.Duration
}

// Registry fetches writer schemas by id. Safe for concurrent use.
type Registry struct {
	client      schemaregistry.Client
	unknownAsks int
	unknownWait time.Duration
	unknownFor  time.Duration
	mu          sync.Mutex
	unknown     map[int]time.Time // ids judged unknown, and when
}

// maxUnknown bounds the ids remembered as unknown; past it they are all forgotten (and asked for
// again), which costs requests, never a wrong verdict.
const maxUnknown = 1000

// NewRegistry returns a registry client for c.
// The URL must be http or https: the client would take mock:// for its in-memory fake, and a list
// of URLs (its failover form) for one.
func NewRegistry(c RegistryConfig) (*Registry, error) {
	if u, err := url.Parse(c.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || strings.Contains(c.URL, ",") {
		return nil, fmt.Errorf("schema registry %q: not an http or https URL", c.URL)
	}
	var conf *schemaregistry.Config
	if c.Username != "" {
		conf = schemaregistry.NewConfigWithBasicAuthentication(c.URL, c.Username, c.Password)
	} else {
		conf = schemaregistry.NewConfig(c.URL)
	}
	conf.SslCaLocation, conf.SslCertificateLocation, conf.SslKeyLocation = c.CAFile, c.CertFile, c.KeyFile
	conf.CacheCapacity = c.CacheCapacity
	if conf.CacheCapacity == 0 {
		conf.CacheCapacity = 1000
	}
	if c.RequestTimeout > 0 {
		conf.RequestTimeoutMs = int(c.RequestTimeout.Milliseconds())
		conf.ConnectionTimeoutMs = conf.RequestTimeoutMs
	}
	// The client's own retries sleep without a context; the caller's back-off (which a session's
	// end can cut short) is the one retry loop.
	conf.MaxRetries = 0
	client, err := schemaregistry.NewClient(conf)
	if err != nil {
		return nil, fmt.Errorf("schema registry %s: %w", c.URL, err)
	}
	r := &Registry{client: client, unknownAsks: c.UnknownAsks, unknownWait: c.UnknownWait,
		unknownFor: c.UnknownFor, unknown: map[int]time.Time{}}
	if r.unknownAsks <= 0 {
		r.unknownAsks = 3
	}
	if r.unknownWait <= 0 {
		r.unknownWait = time.Second
	}
	if r.unknownFor <= 0 {
		r.unknownFor = time.Minute
	}
	return r, nil
}

// Client is the underlying client (tests register schemas and serialize records with it).
func (r *Registry) Client() schemaregistry.Client { return r.client }

// Schema returns the schema registered under id: the client caches it, so a known id costs no
// request. The error wraps ErrUnknownSchema or ErrUnavailable (or ctx's error).
func (r *Registry) Schema(ctx context.Context, id int) (schemaregistry.SchemaInfo, error) {
	r.mu.Lock()
	at, known := r.unknown[id]
	r.mu.Unlock()
	if known && time.Since(at) < r.unknownFor {
		return schemaregistry.SchemaInfo{}, fmt.Errorf("%w %d (judged so %s ago)", ErrUnknownSchema, id, time.Since(at).Round(time.Millisecond))
	}
	for ask := 1; ; ask++ {
		info, err := r.client.GetBySubjectAndID("", id)
		var re *rest.Error
		switch {
		case err == nil:
			return info, nil
		case !errors.As(err, &re) || re.Code != codeSchemaNotFound:
			return info, fmt.Errorf("%w: schema id %d: %w", ErrUnavailable, id, err)
		case ask >= r.unknownAsks:
			r.mu.Lock()
			if len(r.unknown) >= maxUnknown {
				clear(r.unknown)
			}
			r.unknown[id] = time.Now()
			r.mu.Unlock()
			return info, fmt.Errorf("%w %d (the registry answered %d %d times)", ErrUnknownSchema, id, re.Code, ask)
		}
		select {
		case <-ctx.Done():
			return info, ctx.Err()
		case <-time.After(r.unknownWait):
		}
	}
}

// Versions returns every version registered under subject, oldest first. The error wraps
// ErrNoSubject when the registry has none, ErrUnavailable (or is ctx's error) when it could not be
// asked.
func (r *Registry) Versions(ctx context.Context, subject string) ([]schemaregistry.SchemaMetadata, error) {
	nums, err := r.client.GetAllVersions(subject)
	if re := (*rest.Error)(nil); (errors.As(err, &re) && re.Code == codeSubjectNotFound) || (err == nil && len(nums) == 0) {
		return nil, fmt.Errorf("%w: %s", ErrNoSubject, subject)
	} else if err != nil {
		return nil, fmt.Errorf("%w: versions of %s: %w", ErrUnavailable, subject, err)
	}
	out := make([]schemaregistry.SchemaMetadata, 0, len(nums))
	for _, n := range nums {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		m, err := r.client.GetSchemaMetadata(subject, n)
		if err != nil {
			return nil, fmt.Errorf("%w: %s version %d: %w", ErrUnavailable, subject, n, err)
		}
		out = append(out, m)
	}
	return out, nil
}

// references hands visit each schema refs name, and each schema those reference in turn, once
// each (seen holds the names visited), a schema after those it references: the order a parser of
// named types needs them in. A reference is fetched even if its version has since been deleted,
// as Confluent's serdes fetch it: records written under it still need it. The error wraps
// ErrUnavailable unless the registry said it has no such schema, or is visit's.
func (r *Registry) references(ctx context.Context, refs []schemaregistry.Reference, seen map[string]bool,
	visit func(name string, m schemaregistry.SchemaMetadata) error) error {
	for _, ref := range refs {
		if seen[ref.Name] {
			continue
		}
		seen[ref.Name] = true
		if err := ctx.Err(); err != nil {
			return err
		}
		m, err := r.client.GetSchemaMetadataIncludeDeleted(ref.Subject, ref.Version, true)
		var re *rest.Error
		if errors.As(err, &re) && re.Code/100 == 404 {
			// The registry has no such subject or version: the schema cannot be compiled, now
			// or later (40401 subject, 40402 version not found).
			return fmt.Errorf("%s version %d (referenced as %s): %w", ref.Subject, ref.Version, ref.Name, err)
		}
		if err != nil {
			return fmt.Errorf("%w: %s version %d (referenced as %s): %w", ErrUnavailable, ref.Subject, ref.Version, ref.Name, err)
		}
		if err := r.references(ctx, m.References, seen, visit); err != nil {
			return err
		}
		if err := visit(ref.Name, m); err != nil {
			return err
		}
	}
	return nil
}
