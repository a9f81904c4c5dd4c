package kernels

import (
	"math"
	"runtime"
	"sync"
	"sync/atomic"
)

// parallel runs items [0, n) on up to GOMAXPROCS workers taking items from a shared
// counter; newWorker is called once per worker and returns the function that processes
// one item with that worker's scratch. work estimates the flops of all items; small jobs
// run on the calling goroutine.
func parallel(n int, work float64, newWorker func() func(item int)) {
	if n <= 0 {
		return
	}
	w := min(runtime.GOMAXPROCS(0), n)
	if work < 2e6 {
		w = 1
	}
	if w == 1 {
		f := newWorker()
		for i := range n {
			f(i)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range w {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f := newWorker()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				f(i)
			}
		}()
	}
	wg.Wait()
}

// dot32 returns sum a[i]*b[i] over len(a), accumulated in float64.
func dot32(a, b []float32) float64 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float64
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += float64(a[i]) * float64(b[i])
		s1 += float64(a[i+1]) * float64(b[i+1])
		s2 += float64(a[i+2]) * float64(b[i+2])
		s3 += float64(a[i+3]) * float64(b[i+3])
	}
	for ; i < len(a); i++ {
		s0 += float64(a[i]) * float64(b[i])
	}
	return (s0 + s1) + (s2 + s3)
}

// dot64 returns sum a[i]*b[i] over len(a) for a float64 a and float32 b.
func dot64(a []float64, b []float32) float64 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float64
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += a[i] * float64(b[i])
		s1 += a[i+1] * float64(b[i+1])
		s2 += a[i+2] * float64(b[i+2])
		s3 += a[i+3] * float64(b[i+3])
	}
	for ; i < len(a); i++ {
		s0 += a[i] * float64(b[i])
	}
	return (s0 + s1) + (s2 + s3)
}

// dot32x4 returns the dot products of w with four rows c0..c3, accumulated in float64,
// loading each element of w once.
func dot32x4(w, c0, c1, c2, c3 []float32) (s0, s1, s2, s3 float64) {
	n := len(w)
	c0, c1, c2, c3 = c0[:n], c1[:n], c2[:n], c3[:n]
	for i, x := range w {
		wf := float64(x)
		s0 += wf * float64(c0[i])
		s1 += wf * float64(c1[i])
		s2 += wf * float64(c2[i])
		s3 += wf * float64(c3[i])
	}
	return
}

// axpy64 adds a*x[i] to y[i] over len(y).
func axpy64(y []float64, a float64, x []float32) {
	x = x[:len(y)]
	for i, v := range x {
		y[i] += a * float64(v)
	}
}

// softmaxInPlace turns scores[:n] into exp(scores-max) and returns max and their sum.
func softmaxInPlace(scores []float64) (m, z float64) {
	m = math.Inf(-1)
	for _, s := range scores {
		m = math.Max(m, s)
	}
	for i, s := range scores {
		e := math.Exp(s - m)
		scores[i] = e
		z += e
	}
	return m, z
}

// mergeState folds the normalised partial output o2 with log-sum-exp lse2 into (o, lse),
// as sglang's merge_state: the result is the softmax over the union of both key sets.
func mergeState(o []float64, lse *float64, o2 []float64, lse2 float64) {
	a := *lse
	if math.IsInf(a, -1) {
		copy(o, o2)
		*lse = lse2
		return
	}
	m := math.Max(a, lse2)
	wa, wb := math.Exp(a-m), math.Exp(lse2-m)
	n := wa + wb
	wa, wb = wa/n, wb/n
	for i := range o {
		o[i] = o[i]*wa + o2[i]*wb
	}
	*lse = m + math.Log(n)
}
