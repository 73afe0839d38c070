// The registry as the oracle reads it: the wire format's header parsed here, and writer schemas
// fetched by plain HTTP GET of the Confluent API's /schemas/ids/{id}, with none of relay's code
// (internal/format) or its registry client. Invariant: an id is unknown only when the registry
// answered 404 for it; any other failure is an error of the check, never a record's verdict.

package oracle

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// foldFramed folds records in the wire format: too_large (the whole value) and bad_header first,
// then read turns the schema id and the bytes after the header into the JSON object the oracle's
// JSON rules judge, or the verdict its bytes and the registry alone decide; an error of read is
// the registry's, not a record's.
func (s *Spec) foldFramed(payloads [][]byte, read func(id uint32, body []byte) (object []byte, verdict string, err error)) (*Result, error) {
	objects := make([][]byte, len(payloads))
	verdicts := make([]string, len(payloads))
	for i, p := range payloads {
		id, body, ok := header(p)
		var err error
		switch {
		case len(p) > s.Limits.MaxPayloadBytes:
			verdicts[i] = "too_large"
		case !ok:
			verdicts[i] = "bad_header"
		default:
			objects[i], verdicts[i], err = read(id, body)
		}
		if err != nil {
			return nil, err
		}
	}
	return s.fold(len(payloads), func(i int) (map[string]value, time.Time, string, string) {
		if verdicts[i] != "" {
			return nil, time.Time{}, verdicts[i], ""
		}
		return s.decodeObject(objects[i])
	}), nil
}

// header splits a value in Confluent's wire format (a zero byte, the schema id as 4 bytes
// big-endian, the payload); ok is false for anything else, an id past int32 included.
func header(p []byte) (id uint32, body []byte, ok bool) {
	if len(p) < 5 || p[0] != 0 || p[1]&0x80 != 0 {
		return 0, nil, false
	}
	return binary.BigEndian.Uint32(p[1:5]), p[5:], true
}

// registry is one registry's Confluent API.
type registry struct {
	url    string
	client *http.Client
}

func newRegistry(url string) registry {
	return registry{url: strings.TrimRight(url, "/"), client: &http.Client{Timeout: 30 * time.Second}}
}

// registered is the registry's answer for a schema id.
type registered struct {
	Schema     string `json:"schema"`
	SchemaType string `json:"schemaType"` // "" or AVRO for Avro, JSON, PROTOBUF
	// References are the schemas this one imports (Protobuf), by subject and version.
	References []struct {
		Name    string `json:"name"`
		Subject string `json:"subject"`
		Version int    `json:"version"`
	} `json:"references"`
}

// schema fetches the schema of id; found is false when the registry answered 404.
func (r registry) schema(id uint32) (registered, bool, error) {
	return r.get(fmt.Sprintf("/schemas/ids/%d", id))
}

// version fetches the schema registered as version of subject; found is false on 404.
func (r registry) version(subject string, version int) (registered, bool, error) {
	return r.get(fmt.Sprintf("/subjects/%s/versions/%d", url.PathEscape(subject), version))
}

func (r registry) get(path string) (got registered, found bool, err error) {
	resp, err := r.client.Get(r.url + path)
	if err != nil {
		return got, false, fmt.Errorf("oracle: %s: %w", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return got, false, fmt.Errorf("oracle: %s: %w", path, err)
	}
	if resp.StatusCode == http.StatusNotFound {
		return got, false, nil
	}
	if resp.StatusCode != http.StatusOK {
		return got, false, fmt.Errorf("oracle: %s: %s: %s", path, resp.Status, body)
	}
	if err := json.Unmarshal(body, &got); err != nil {
		return got, false, fmt.Errorf("oracle: %s: %w", path, err)
	}
	return got, true, nil
}
