package csi

// The decisions of SetUp and TearDown, from facts read off the disk and
// the driver. They decide; Mounter does.

// setUpFacts are what SetUp knows before it calls the driver.
type setUpFacts struct {
	Published    bool // the publish target is a mount point
	Staged       bool // the staging target is a mount point
	StageUnstage bool // the driver has STAGE_UNSTAGE_VOLUME
	Ephemeral    bool // an inline volume: never staged
}

// setUpSteps are the calls SetUp makes, in this order.
type setUpSteps struct {
	Stage   bool // NodeStageVolume, before publishing
	Publish bool // NodePublishVolume
}

// planSetUp: a published volume needs nothing (a restarted nodelet finds
// it so); a persistent volume of a staging driver is staged first unless
// it already is.
func planSetUp(f setUpFacts) setUpSteps {
	if f.Published {
		return setUpSteps{}
	}
	return setUpSteps{
		Stage:   f.StageUnstage && !f.Ephemeral && !f.Staged,
		Publish: true,
	}
}

// tearDownFacts are what TearDown knows after reading vol_data.json.
type tearDownFacts struct {
	Ephemeral    bool // the volume was published as an inline volume
	StageUnstage bool // the driver has STAGE_UNSTAGE_VOLUME
	OtherUsers   bool // another pod's vol_data.json names the same driver and handle
	StagingData  bool // the staging directory's vol_data.json exists
}

// tearDownSteps are the calls TearDown makes, in this order.
type tearDownSteps struct {
	Unpublish bool // NodeUnpublishVolume (always: it is idempotent)
	Unstage   bool // NodeUnstageVolume, after unpublishing
	// RemoveStaging removes the staging directory and its vol_data.json
	// (also for a driver that does not stage: the kubelet writes it for
	// every persistent volume).
	RemoveStaging bool
}

// planTearDown: the volume is unpublished; once no pod uses its handle any
// more, it is unstaged (if the driver stages) and the staging directory
// removed.
func planTearDown(f tearDownFacts) tearDownSteps {
	last := !f.Ephemeral && !f.OtherUsers && f.StagingData
	return tearDownSteps{
		Unpublish:     true,
		Unstage:       last && f.StageUnstage,
		RemoveStaging: last,
	}
}
