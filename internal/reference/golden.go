package reference

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"

	"github.com/attnplug/attnplug/internal/modroot"
)

// GoldenName is the golden file, in this package's testdata directory:
// generated requests with the answers sglang's code gave them. Tests
// compare attnplug with it on every run, with or without python3 and the
// reference file; `make golden` (go generate ./internal/reference)
// writes it again from the reference.
const GoldenName = "golden.jsonl.gz"

// Golden is the content of the golden file: a header line, then one case
// per line.
type Golden struct {
	Header GoldenHeader
	Cases  []Case
}

// GoldenHeader says where the answers came from.
type GoldenHeader struct {
	// Reference is the reference file's base name, ReferenceSHA256 its
	// hash: the sglang code that answered.
	Reference       string `json:"reference"`
	ReferenceSHA256 string `json:"reference_sha256"`
	// DefaultPlatform stands for a request without a platform.
	DefaultPlatform string `json:"default_platform"`
	// Seed is the seed of Generate's generator.
	Seed [2]uint64 `json:"seed"`
	// Count is the number of cases.
	Count int `json:"count"`
}

// Case is one request of the dispatch format and the reference's answer.
type Case struct {
	Request json.RawMessage `json:"request"`
	Method  string          `json:"method"`
	Handler string          `json:"handler"`
}

// GoldenPath returns the path of the golden file of the repository that
// holds dir.
func GoldenPath(dir string) (string, error) {
	root, err := modroot.Find(dir)
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "internal", "reference", "testdata", GoldenName), nil
}

// LoadGolden reads the golden file of the repository that holds dir.
func LoadGolden(dir string) (*Golden, error) {
	path, err := GoldenPath(dir)
	if err != nil {
		return nil, err
	}
	return ReadGolden(path)
}

// MakeGolden generates n requests from seed and asks the oracle for their
// answers; a request the reference cannot answer is an error.
func MakeGolden(ctx context.Context, o *Oracle, n int, seed [2]uint64, defaultPlatform string) (*Golden, error) {
	rng := rand.New(rand.NewPCG(seed[0], seed[1]))
	var in bytes.Buffer
	g := &Golden{Cases: make([]Case, n)}
	for i := range g.Cases {
		g.Cases[i].Request = Generate(rng)
		in.Write(g.Cases[i].Request)
		in.WriteByte('\n')
	}
	answers, err := o.Evaluate(ctx, in.Bytes(), defaultPlatform)
	if err != nil {
		return nil, err
	}
	if len(answers) != n {
		return nil, fmt.Errorf("golden: the reference answered %d of %d requests", len(answers), n)
	}
	for i, a := range answers {
		if a.Error != "" {
			return nil, fmt.Errorf("golden: request %d %s: the reference has no answer: %s", i+1, g.Cases[i].Request, a.Error)
		}
		g.Cases[i].Method, g.Cases[i].Handler = a.Method, a.Handler
	}
	sum, err := fileSHA256(o.reference)
	if err != nil {
		return nil, err
	}
	g.Header = GoldenHeader{Reference: filepath.Base(o.reference), ReferenceSHA256: sum, DefaultPlatform: defaultPlatform, Seed: seed, Count: n}
	return g, nil
}

// ReferenceSHA256 returns the SHA-256 of the oracle's reference file.
func (o *Oracle) ReferenceSHA256() (string, error) { return fileSHA256(o.reference) }

func fileSHA256(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// Write writes g gzip-compressed as JSON Lines: the header, then the
// cases. The output depends on g only.
func (g *Golden) Write(w io.Writer) error {
	zw, err := gzip.NewWriterLevel(w, gzip.BestCompression)
	if err != nil {
		return err
	}
	bw := bufio.NewWriter(zw)
	enc := json.NewEncoder(bw)
	if err := enc.Encode(g.Header); err != nil {
		return err
	}
	for _, c := range g.Cases {
		if err := enc.Encode(c); err != nil {
			return err
		}
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	return zw.Close()
}

// ReadGolden reads the golden file at path; the header's count must match
// the cases read.
func ReadGolden(path string) (*Golden, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("golden %s: %w", path, err)
	}
	dec := json.NewDecoder(zr)
	dec.DisallowUnknownFields()
	g := &Golden{}
	if err := dec.Decode(&g.Header); err != nil {
		return nil, fmt.Errorf("golden %s: header: %w", path, err)
	}
	for {
		var c Case
		err := dec.Decode(&c)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("golden %s: case %d: %w", path, len(g.Cases)+1, err)
		}
		g.Cases = append(g.Cases, c)
	}
	if len(g.Cases) != g.Header.Count {
		return nil, fmt.Errorf("golden %s: %d cases, the header says %d", path, len(g.Cases), g.Header.Count)
	}
	return g, nil
}
