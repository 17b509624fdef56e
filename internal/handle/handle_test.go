package handle

import (
	"sync"
	"testing"

	"gotest.tools/v3/assert"
)

func TestTable(t *testing.T) {
	var tab Table[string]
	_, ok := tab.Get(0)
	assert.Assert(t, !ok, "0 is never valid")
	a := tab.Add("a")
	b := tab.Add("b")
	assert.Assert(t, a != 0 && b != 0 && a != b)
	assert.Equal(t, a&Tag, Tag, "tagged")
	assert.Equal(t, a, Tag|1<<4, "the first handle of a table")
	v, ok := tab.Get(a)
	assert.Assert(t, ok)
	assert.Equal(t, v, "a")
	assert.Equal(t, len(tab.All()), 2)
	v, ok = tab.Remove(a)
	assert.Assert(t, ok)
	assert.Equal(t, v, "a")
	_, ok = tab.Remove(a)
	assert.Assert(t, !ok, "a second remove finds nothing")
	_, ok = tab.Get(a)
	assert.Assert(t, !ok)
	c := tab.Add("c")
	assert.Assert(t, c != a, "ids are never reused")
	assert.DeepEqual(t, len(tab.All()), 2)
}

func TestTableConcurrent(t *testing.T) {
	var tab Table[int]
	var wg sync.WaitGroup
	seen := make([][]uintptr, 4)
	for g := range 4 {
		wg.Go(func() {
			for i := range 1000 {
				seen[g] = append(seen[g], tab.Add(i))
			}
		})
	}
	wg.Wait()
	unique := map[uintptr]bool{}
	for _, s := range seen {
		for _, k := range s {
			unique[k] = true
		}
	}
	assert.Equal(t, len(unique), 4000)
	assert.Equal(t, len(tab.All()), 4000)
}
