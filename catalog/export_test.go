package catalog

// QTaskSnapshot is the task statement, for the plan test (tasks_test.go).
const QTaskSnapshot = qTaskSnapshot
