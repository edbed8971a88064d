package catalog

// QTaskSnapshot is the task statement, for the plan test (tasks_test.go).
const QTaskSnapshot = qTaskSnapshot

// len is how many revisions the cache holds.
func (c *docCache) len() int { return c.lru.Len() }
