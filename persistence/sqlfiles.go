package persistence

import (
	"embed"
	"fmt"
)

//go:embed sql/*.sql
var sqlFS embed.FS

// q returns the statement in sql/<name>.sql; a missing file is a build-time bug.
func q(name string) string {
	b, err := sqlFS.ReadFile("sql/" + name + ".sql")
	if err != nil {
		panic(fmt.Sprintf("persistence: missing statement %s: %v", name, err))
	}
	return string(b)
}

// The statements, read once at start.
var (
	sqlMigrateLock          = q("migrate_lock")
	sqlMigrateUnlock        = q("migrate_unlock")
	sqlMigratePrepare       = q("migrate_prepare")
	sqlMigrateApplied       = q("migrate_applied")
	sqlMigrateRecord        = q("migrate_record")
	sqlMigrateTryLock       = q("migrate_try_lock")
	sqlMigrateLockHolder    = q("migrate_lock_holder")
	sqlMigrateBrokersLock   = q("migrate_brokers_lock")
	sqlMigrateOlderBrokers  = q("migrate_older_brokers")
	sqlEnsureQueue          = q("ensure_queue")
	sqlEnsurePartition      = q("ensure_partition")
	sqlGetPartition         = q("get_partition")
	sqlEnsurePartitions     = q("ensure_partitions")
	sqlGetPartitions        = q("get_partitions")
	sqlBundleLock           = q("bundle_lock")
	sqlBundleLockSkip       = skipLocked(sqlBundleLock, "FOR NO KEY UPDATE")
	sqlPartitionEndsPresent = q("partition_ends_present")
	sqlPartitionEndsEnsure  = q("partition_ends_ensure")
	sqlAdminDeleteQueueLock = q("admin_delete_queue_lock")
	sqlBundleProbe          = q("bundle_probe")
	sqlProbePlanBegin       = q("probe_plan_begin")
	sqlPlanEnd              = q("plan_end")
	sqlBundleInsert         = q("bundle_insert")
	sqlBundleStamp          = q("bundle_stamp")
	sqlBundleBump           = q("bundle_bump")
	sqlBundleOriginals      = q("bundle_originals")
	sqlConfigureLock        = q("configure_lock")
	sqlConfigureUpdate      = q("configure_update")
	sqlGetQueue             = q("get_queue")
)
