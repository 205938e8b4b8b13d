package meter

import "bytes"

// The shape memo: most chunks of a chat or completions stream are the
// chunk before with another text. vLLM's, SGLang's, TGI's and
// llama.cpp's keep their id, model and the rest the same from one chunk
// to the next (llama.cpp and TGI stamp each chunk's created, which so
// changes once a second); only the delta's content (chat) or the
// choice's text (completions) changes. Such a chunk reads exactly as the
// one before: the meter reads that string only for being empty or not
// (and for the echo's text, so a stream with an echo keeps no memo).
// So, when a
// chunk was a plain token (memoInfo) that changed nothing of the
// stream's state, the parser keeps its text with where that string lies
// (the memo), and a next chunk that is the same text around a non-empty
// string in the same place reads as the same plain token, without
// parsing: a compare of both sides and a scan of the string for its
// end. Any other chunk is parsed, and may become the memo.
//
// Why that is exact: the chunk's text before the string and after it is
// the memo's byte for byte, and the string ends where the memo's did
// (its closing quote found by JSON's rule, as fastjson finds it), so the
// chunk parses to the memo's tree with another non-empty string in that
// one place; and the memo's place is a string of a member named as the
// content is (choices[0].delta's content, reasoning_content or
// reasoning, or choices[0].text), which the meter reads, if at all, for
// being empty or not. The walk that finds it also gives up on a name
// written with an escape, a name on the way written twice and choices of
// several: not needed for exactness (whichever such member fastjson
// reads, a non-empty string stays one), but it keeps the place the one
// fastjson's lookup finds. TestShapeMemoReadsAsParsed checks it against
// parsing, over the
// recorded streams (framed whole and a byte at a time) and over copies
// of their chunks with text written into them or over them.

// memoMax is the longest chunk kept as a memo (a larger one is parsed
// every time, as is any chunk over leanFrom).
const memoMax = 2 << 10

// memoInfo is what the memo's chunks read as: a plain token with content
// and nothing else.
var memoInfo = EventInfo{PromptTokens: Unknown, CompletionTokens: Unknown, Token: true, Content: true}

// plainToken reports whether info is memoInfo.
func plainToken(info *EventInfo) bool {
	return info.Token && info.Content && !info.UsageOnly && !info.Finish &&
		!info.Done && !info.Pending && !info.HasUsage && !info.Error &&
		!info.OtherChoice && !info.OwnOutput && info.ModelOp == 0 &&
		info.ChoicesEnded == 0 && info.FinishIndex == 0 &&
		info.FirstChoiceUsage == 0 && info.PromptTokens == Unknown &&
		info.CompletionTokens == Unknown && len(info.ErrorMessage) == 0
}

// memoHit reports whether ev reads as the memo's chunk (memoInfo).
func (s *openAIState) memoHit(ev *Event, api API) bool {
	if s.memoStart == 0 || api != s.memoAPI || len(ev.Type) != 0 || !ev.HasData ||
		s.echo != EchoNone || s.finishedChoices != 0 {
		return false
	}
	data := bytes.TrimSpace(ev.Data)
	head, tail := s.buf[:s.memoStart], s.buf[s.memoEnd:]
	if len(data) <= len(head)+len(tail) || len(data) > memoMax ||
		!bytes.Equal(data[:len(head)], head) || !bytes.Equal(data[len(data)-len(tail):], tail) {
		return false
	}
	return stringEnd(data, len(head)) == len(data)-len(tail)
}

// memoKeep makes ev the memo, when it was a plain token of a chat or
// completions stream with no echo, which left the state as it found it
// (the caller's info and state are after its Parse), and the string the
// meter reads of it is found; otherwise it forgets the memo.
func (s *openAIState) memoKeep(ev *Event, info *EventInfo, api API) {
	s.memoStart = 0
	if (api != APIChat && api != APICompletions) || len(ev.Type) != 0 || !ev.HasData ||
		s.echo != EchoNone || s.finishedChoices != 0 || s.reasonLen != 0 || !plainToken(info) {
		return
	}
	data := bytes.TrimSpace(ev.Data)
	if len(data) > memoMax || len(data) == 0 || data[0] != '{' {
		return
	}
	start, end := contentString(data, api == APICompletions)
	if start <= 0 {
		return
	}
	s.buf = append(s.buf[:0], data...)
	s.memoStart, s.memoEnd, s.memoAPI = uint16(start), uint16(end), api
}

// stringEnd returns where the JSON string whose text begins at from in
// data ends (its closing quote), or -1: the first quote after from that
// an odd run of backslashes does not escape, as fastjson reads it.
func stringEnd(data []byte, from int) int {
	i := from
	for {
		n := bytes.IndexByte(data[i:], '"')
		if n < 0 {
			return -1
		}
		q := i + n
		k := q
		for k > i && data[k-1] == '\\' {
			k--
		}
		if (q-k)%2 == 0 {
			return q
		}
		i = q + 1
	}
}

// contentString returns where the text of the string the meter reads as
// a chunk's content lies in data, a chunk parsed as a JSON object: of
// choices[0].delta, the first of content, reasoning_content and reasoning
// that is a non-empty string (the meter reads each of them only for
// being empty or not), or choices[0].text of a completions chunk; from
// just after its opening quote to its closing one. start is 0 when the
// chunk is not plainly so: choices is not an array of one object, no
// such string is there, a name is written with an escape, or a name on
// the way is written twice in its object.
func contentString(data []byte, completions bool) (start, end int) {
	w := walker{b: data}
	var at [3]int
	if w.members(0, []string{"choices"}, at[:1]); at[0] < 0 || data[at[0]] != '[' {
		return 0, 0
	}
	c := w.ws(at[0] + 1)
	if c >= len(data) || data[c] != '{' {
		return 0, 0
	}
	if after := w.ws(w.value(c)); w.bad || after >= len(data) || data[after] != ']' {
		return 0, 0 // not one choice
	}
	if completions {
		w.members(c, []string{"text"}, at[:1])
	} else if w.members(c, []string{"delta"}, at[:1]); at[0] >= 0 && data[at[0]] == '{' {
		w.members(at[0], []string{"content", "reasoning_content", "reasoning"}, at[:])
	} else {
		return 0, 0
	}
	if w.bad {
		return 0, 0
	}
	for _, v := range at {
		if v < 0 || data[v] != '"' {
			continue
		}
		if e := stringEnd(data, v+1); e > v+1 {
			return v + 1, e
		}
	}
	return 0, 0
}

// walker walks JSON text that fastjson parsed, to find a member's value.
// It is set bad by a name written with an escape and by text it does
// not follow.
type walker struct {
	b   []byte
	bad bool
}

func (w *walker) ws(i int) int {
	for i < len(w.b) && (w.b[i] == ' ' || w.b[i] == '\t' || w.b[i] == '\n' || w.b[i] == '\r') {
		i++
	}
	return i
}

// members sets at[k] to where the value of the member names[k] of the
// object at obj begins, or -1 when it is not there; a name written twice
// sets the walk bad, as does a name written with an escape.
func (w *walker) members(obj int, names []string, at []int) {
	for k := range at {
		at[k] = -1
	}
	i := w.ws(obj + 1)
	if i < len(w.b) && w.b[i] == '}' {
		return
	}
	for !w.bad {
		if i >= len(w.b) || w.b[i] != '"' {
			w.bad = true
			return
		}
		e := stringEnd(w.b, i+1)
		if e < 0 || bytes.IndexByte(w.b[i+1:e], '\\') >= 0 {
			w.bad = true
			return
		}
		key := w.b[i+1 : e]
		i = w.ws(e + 1)
		if i >= len(w.b) || w.b[i] != ':' {
			w.bad = true
			return
		}
		v := w.ws(i + 1)
		for k, n := range names {
			if string(key) == n {
				if at[k] >= 0 {
					w.bad = true // written twice
					return
				}
				at[k] = v
			}
		}
		i = w.ws(w.value(v))
		if i < len(w.b) && w.b[i] == ',' {
			i = w.ws(i + 1)
			continue
		}
		if i >= len(w.b) || w.b[i] != '}' {
			w.bad = true
		}
		return
	}
}

// value returns where the value at i ends (just after it).
func (w *walker) value(i int) int {
	if i >= len(w.b) {
		w.bad = true
		return i
	}
	switch w.b[i] {
	case '"':
		e := stringEnd(w.b, i+1)
		if e < 0 {
			w.bad = true
			return len(w.b)
		}
		return e + 1
	case '{', '[':
		depth := 0
		for j := i; j < len(w.b); j++ {
			switch w.b[j] {
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1
				}
			case '"':
				e := stringEnd(w.b, j+1)
				if e < 0 {
					w.bad = true
					return len(w.b)
				}
				j = e
			}
		}
		w.bad = true
		return len(w.b)
	}
	j := i
	for j < len(w.b) && w.b[j] != ',' && w.b[j] != '}' && w.b[j] != ']' &&
		w.b[j] != ' ' && w.b[j] != '\t' && w.b[j] != '\n' && w.b[j] != '\r' {
		j++
	}
	return j
}

// noMemo turns the memo off (tests compare with parsing every chunk).
var noMemo = false
