package client

import (
	"testing"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/store/wire"
	"github.com/kvferry/kvferry/store/wire/coro"
)

// TestTaskStatusFromCoro: Mooncake's TaskStatus values (task_manager.h:
// PENDING 0, PROCESSING 1, FAILED 2, SUCCESS 3; FAILED and SUCCESS the
// other way round from kvferry's) read as kvferry's statuses.
func TestTaskStatusFromCoro(t *testing.T) {
	for _, tc := range []struct {
		mooncake int32
		want     wire.TaskStatus
	}{
		{0, wire.TaskStatus_TASK_STATUS_PENDING},
		{1, wire.TaskStatus_TASK_STATUS_PROCESSING},
		{2, wire.TaskStatus_TASK_STATUS_FAILED},
		{3, wire.TaskStatus_TASK_STATUS_SUCCESS},
		{7, wire.TaskStatus_TASK_STATUS_PENDING},
	} {
		assert.Equal(t, taskStatusFromCoro(coro.TaskStatus(tc.mooncake)), tc.want, "mooncake status %d", tc.mooncake)
	}
}

// TestQueryTaskFromCoro: every field of Mooncake's QueryTaskResponse
// converts back; a zero assigned client is none.
func TestQueryTaskFromCoro(t *testing.T) {
	id := coro.UUID{Hi: 0x0123456789abcdef, Lo: 0xfedcba9876543210}
	cl := coro.UUID{Hi: 1, Lo: 2}
	got := queryTaskFromCoro(coro.QueryTaskResponse{ID: id, Type: coro.TaskReplicaMove, Status: coro.TaskSuccess,
		CreatedAtMsEpoch: 1000, LastUpdatedAtMsEpoch: 2000, AssignedClient: cl, Message: "done"})
	assert.Equal(t, got.GetId(), "01234567-89ab-cdef-fedc-ba9876543210")
	assert.Equal(t, got.GetType(), wire.TaskKind_TASK_KIND_MOVE)
	assert.Equal(t, got.GetStatus(), wire.TaskStatus_TASK_STATUS_SUCCESS)
	assert.Equal(t, got.GetCreatedAtMsEpoch(), int64(1000))
	assert.Equal(t, got.GetLastUpdatedAtMsEpoch(), int64(2000))
	assert.Equal(t, got.GetAssignedClient(), "00000000-0000-0001-0000-000000000002")
	assert.Equal(t, got.GetMessage(), "done")

	got = queryTaskFromCoro(coro.QueryTaskResponse{ID: id, Type: coro.TaskReplicaCopy, Status: coro.TaskFailed})
	assert.Equal(t, got.GetType(), wire.TaskKind_TASK_KIND_COPY)
	assert.Equal(t, got.GetStatus(), wire.TaskStatus_TASK_STATUS_FAILED)
	assert.Equal(t, got.GetAssignedClient(), "")
}
