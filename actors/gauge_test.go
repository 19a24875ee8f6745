package actors

import dto "github.com/prometheus/client_model/go"

type dtoGauge struct{}

func (dtoGauge) read(h *Host) int {
	m := &dto.Metric{}
	if err := h.metrics.MailboxDepth.Write(m); err != nil {
		return -1
	}
	return int(m.GetGauge().GetValue())
}
