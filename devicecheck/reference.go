package devicecheck

import (
	"fmt"
	"math"
	"runtime"
	"sync"
)

// The float64 references. Every input of a check is a hash of its index
// (package devkernels/fill writes the same values on the device), so a
// reference row is computed from the indexes alone: no tensor is copied
// back but the outputs (and an FP8 cache, whose bytes the conversion
// chose).

func mix(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// hashBF16 is fill_bf16's element i for seed, as bf16 bits.
func hashBF16(seed uint64, i int64) uint16 {
	h := mix(seed + uint64(i)*0x9e3779b97f4a7c15)
	sign := uint16(h >> 63)
	e := uint16(h>>60) & 3
	m := uint16(h>>53) & 127
	return sign<<15 | (126-e)<<7 | m
}

// BF16 returns the value of bf16 bits.
func BF16(b uint16) float64 { return float64(math.Float32frombits(uint32(b) << 16)) }

// hashValue is fill_bf16's element i for seed, as a number.
func hashValue(seed uint64, i int64) float64 { return BF16(hashBF16(seed, i)) }

// e4m3 is the value of an e4m3 byte (no NaN: the fills saturate).
func e4m3(v byte) float64 {
	s := 1.0
	if v&0x80 != 0 {
		s = -1
	}
	ex, m := int(v>>3)&15, float64(v&7)
	if ex == 0 {
		return s * m / 8 * math.Ldexp(1, -6)
	}
	return s * (1 + m/8) * math.Ldexp(1, ex-7)
}

// Check is a comparison of a launch's outputs with the float64 reference.
type Check struct {
	// Rows is how many (token, head) rows were compared.
	Rows int
	// RelErr is ||out-ref|| / ||ref|| over those rows.
	RelErr float64
	// LSEErr is the largest |lse-ref| / max(1, |ref|).
	LSEErr float64
	// Unwritten counts output elements still NaN (poison) anywhere.
	Unwritten int
}

// The tolerances of a Check: bf16 inputs and output, P rounded to bf16.
const (
	MaxRelErr = 1e-2
	MaxLSEErr = 1e-3
)

// OK reports whether ch is within the tolerances.
func (ch Check) OK() bool {
	return ch.Unwritten == 0 && ch.RelErr <= MaxRelErr && ch.LSEErr <= MaxLSEErr && !math.IsNaN(ch.RelErr)
}

func (ch Check) String() string {
	return fmt.Sprintf("rows %d rel_err %.2e lse_err %.2e unwritten %d", ch.Rows, ch.RelErr, ch.LSEErr, ch.Unwritten)
}

// rowRef is the float64 reference of one sampled output row: where the
// row and its LSE are in the outputs, and what they should be.
type rowRef struct {
	out, lse int64
	want     []float64
	wantLSE  float64
}

// compareRows checks n sampled rows, whose references ref computes (called
// concurrently), and counts the poison left anywhere in out and lse.
func compareRows(out []uint16, lse []float32, n int, ref func(k int) rowRef) Check {
	var ch Check
	for _, v := range out {
		if v&0x7f80 == 0x7f80 && v&0x7f != 0 {
			ch.Unwritten++
		}
	}
	for _, v := range lse {
		if math.IsNaN(float64(v)) {
			ch.Unwritten++
		}
	}
	num := make([]float64, n)
	den := make([]float64, n)
	lerr := make([]float64, n)
	Parallel(n, func(k int) {
		r := ref(k)
		for d, w := range r.want {
			diff := BF16(out[r.out+int64(d)]) - w
			num[k] += diff * diff
			den[k] += w * w
		}
		got := float64(lse[r.lse])
		lerr[k] = math.Abs(got-r.wantLSE) / math.Max(1, math.Abs(r.wantLSE))
		switch {
		case math.IsNaN(got):
			lerr[k] = math.Inf(1)
		case math.IsInf(r.wantLSE, -1): // a row without keys
			lerr[k] = 0
			if !math.IsInf(got, -1) {
				lerr[k] = math.Inf(1)
			}
		}
	})
	var sn, sd float64
	for k := range n {
		sn += num[k]
		sd += den[k]
		ch.LSEErr = math.Max(ch.LSEErr, lerr[k])
	}
	ch.Rows = n
	ch.RelErr = math.Sqrt(sn / sd)
	return ch
}

// Parallel runs f(0), ..., f(n-1) on every CPU.
func Parallel(n int, f func(i int)) {
	var wg sync.WaitGroup
	work := make(chan int)
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				f(i)
			}
		}()
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
}

// attend is one row of attention in float64: softmax(scale q·k) v over
// n keys, key(j, buf) writing key j into buf (of len(q)) and returning it,
// value(j, buf) likewise value j (absorbed MLA: the first 512 values of
// the key). It returns the row and its LSE (natural log).
func attend(q []float64, n int64, scale float64, key, value func(j int64, buf []float64) []float64) ([]float64, float64) {
	s := make([]float64, n)
	buf := make([]float64, len(q))
	mx := math.Inf(-1)
	for j := range n {
		k := key(j, buf)
		var dot float64
		for d := range q {
			dot += q[d] * k[d]
		}
		s[j] = dot * scale
		mx = math.Max(mx, s[j])
	}
	var sum float64
	var out []float64
	for j := range n {
		p := math.Exp(s[j] - mx)
		sum += p
		v := value(j, buf)
		if out == nil {
			out = make([]float64, len(v))
		}
		for d := range out {
			out[d] += p * v[d]
		}
	}
	for d := range out {
		out[d] /= sum
	}
	return out, mx + math.Log(sum)
}

// hashRow writes the len(buf) values of seed from element base into buf.
func hashRow(seed uint64, base int64, buf []float64) []float64 {
	for d := range buf {
		buf[d] = hashValue(seed, base+int64(d))
	}
	return buf
}
