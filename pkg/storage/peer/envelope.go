package peer

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/multicache/multicache/pkg/aggregate"
	"github.com/multicache/multicache/pkg/api"
	"github.com/multicache/multicache/pkg/storage"
)

// The envelope is what replicas send each other, one form for lists, gets and watches of both
// APIs. Each frame starts with a line:
//
//	h {json head}\n                          the answer's position, continue, freshness, warnings
//	i N RV KEY [SORT]\n<N bytes>\n           a list's or get's item: its key, its resourceVersion
//	                                         (the part's position), its sort value in a sorted
//	                                         list (base64url), and its object, encoded in the
//	                                         request's Encoding, written as it is
//	ev TYPE N RV KEY\n<N bytes>\n            a watch's object event, TYPE ADDED, MODIFIED or DELETED
//	b RV 0|1\n                               a watch's BOOKMARK; 1 marks the end of the initial events
//	e\n                                      the end of a list or get
//	x {json metav1.Status}\n                 the end of an answer that failed after it started
//
// KEY is an aggregate.Key's String; RV holds no space (a position is base64url). An object is
// never decoded on its way: its length says where it ends.

// head is an answer's first frame.
type head struct {
	ResourceVersion string                 `json:"rv,omitempty"`
	Epoch           string                 `json:"epoch,omitempty"`
	Continue        string                 `json:"continue,omitempty"`
	Count           *storage.Count         `json:"count,omitempty"`
	Freshness       []api.ClusterFreshness `json:"freshness,omitempty"`
	Warnings        []string               `json:"warnings,omitempty"`
}

// writer writes frames, gathered in buf (one of storage.GetBuffer's: release returns it).
type writer struct {
	w   io.Writer
	buf *bytes.Buffer
}

func newWriter(w io.Writer) *writer { return &writer{w: w, buf: storage.GetBuffer()} }

// release returns the writer's buffer to the pool; the writer is not used after.
func (w *writer) release() { storage.PutBuffer(w.buf) }

func (w *writer) flush() error {
	_, err := w.w.Write(w.buf.Bytes())
	w.buf.Reset()
	return err
}

func (w *writer) head(h head) {
	w.buf.WriteString("h ")
	_ = storage.AppendJSON(w.buf, h)
	w.buf.WriteByte('\n')
}

// object appends an item's or an event's frame; typ is "" for an item.
func (w *writer) object(typ string, it storage.Item, rv string, raw []byte) {
	if typ == "" {
		w.buf.WriteString("i ")
	} else {
		w.buf.WriteString("ev ")
		w.buf.WriteString(typ)
		w.buf.WriteByte(' ')
	}
	w.buf.WriteString(strconv.Itoa(len(raw)))
	w.buf.WriteByte(' ')
	if rv == "" {
		rv = "-"
	}
	w.buf.WriteString(rv)
	w.buf.WriteByte(' ')
	w.buf.WriteString(it.Key.String())
	if it.Sort != "" {
		w.buf.WriteByte(' ')
		w.buf.WriteString(base64.RawURLEncoding.EncodeToString([]byte(it.Sort)))
	}
	w.buf.WriteByte('\n')
	w.buf.Write(raw)
	w.buf.WriteByte('\n')
}

func (w *writer) bookmark(rv string, initialEnd bool) {
	w.buf.WriteString("b ")
	w.buf.WriteString(rv)
	if initialEnd {
		w.buf.WriteString(" 1\n")
	} else {
		w.buf.WriteString(" 0\n")
	}
}

func (w *writer) end() { w.buf.WriteString("e\n") }

func (w *writer) fail(st metav1.Status) {
	b, _ := json.Marshal(st)
	w.buf.WriteString("x ")
	w.buf.Write(b)
	w.buf.WriteByte('\n')
}

// frame is one frame read.
type frame struct {
	kind       string // "h", "i", "ev", "b", "e", "x"
	head       head
	typ        string // of an event
	item       storage.Item
	rv         string // of a bookmark
	initialEnd bool
	status     *metav1.Status // of "x"
}

// reader reads frames.
type reader struct {
	r *bufio.Reader
}

func newReader(r io.Reader) *reader { return &reader{r: bufio.NewReaderSize(r, 64<<10)} }

var errMalformed = errors.New("malformed frame")

// maxLine bounds a frame's line: a head names every cluster of its part with its freshness
// (some hundred bytes each), a Status its message.
const maxLine = 64 << 20

// line reads the next line, without its newline. It is the buffer's own bytes while the line
// fits it (the common case: an item's line), valid until the next read.
func (r *reader) line() ([]byte, error) {
	line, err := r.r.ReadSlice('\n')
	if err == nil {
		return line[:len(line)-1], nil
	}
	var long []byte
	for errors.Is(err, bufio.ErrBufferFull) {
		long = append(long, line...)
		if len(long) > maxLine {
			return nil, fmt.Errorf("%w: a line of more than %d MiB", errMalformed, maxLine>>20)
		}
		line, err = r.r.ReadSlice('\n')
	}
	long = append(long, line...)
	if err != nil {
		if errors.Is(err, io.EOF) && len(long) > 0 {
			return nil, io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return long[:len(long)-1], nil
}

// next reads the next frame; io.EOF at the end of the stream.
func (r *reader) next() (frame, error) {
	line, err := r.line()
	if err != nil {
		return frame{}, err
	}
	kind, rest, _ := bytes.Cut(line, []byte{' '})
	f := frame{kind: string(kind)}
	switch f.kind {
	case "h":
		if err := json.Unmarshal(rest, &f.head); err != nil {
			return f, fmt.Errorf("%w: head: %v", errMalformed, err)
		}
	case "i", "ev":
		if f.kind == "ev" {
			var t []byte
			t, rest, _ = bytes.Cut(rest, []byte{' '})
			f.typ = string(t)
		}
		fields := bytes.SplitN(rest, []byte{' '}, 3)
		if len(fields) != 3 {
			return f, fmt.Errorf("%w: %q", errMalformed, line)
		}
		n, err := strconv.Atoi(string(fields[0]))
		if err != nil || n < 0 {
			return f, fmt.Errorf("%w: length %q", errMalformed, fields[0])
		}
		key, sort, hasSort := bytes.Cut(fields[2], []byte{' '})
		k, err := aggregate.ParseKey(string(key))
		if err != nil {
			return f, fmt.Errorf("%w: key: %v", errMalformed, err)
		}
		var sv []byte
		if hasSort {
			if sv, err = base64.RawURLEncoding.AppendDecode(nil, sort); err != nil {
				return f, fmt.Errorf("%w: sort value of %s: %v", errMalformed, k, err)
			}
		}
		rv := string(fields[1])
		if rv == "-" {
			rv = ""
		}
		raw := make([]byte, n+1)
		if _, err := io.ReadFull(r.r, raw); err != nil {
			return f, fmt.Errorf("object of %s: %w", k, err)
		}
		if raw[n] != '\n' {
			return f, fmt.Errorf("%w: object of %s not followed by a newline", errMalformed, k)
		}
		f.item = storage.Item{Key: k, Raw: raw[:n:n], RawRV: rv, RV: rv, Sort: string(sv)}
	case "b":
		rv, end, _ := bytes.Cut(rest, []byte{' '})
		f.rv, f.initialEnd = string(rv), string(end) == "1"
	case "e":
	case "x":
		f.status = &metav1.Status{}
		if err := json.Unmarshal(rest, f.status); err != nil {
			return f, fmt.Errorf("%w: status: %v", errMalformed, err)
		}
	default:
		return f, fmt.Errorf("%w: %q", errMalformed, line)
	}
	return f, nil
}
