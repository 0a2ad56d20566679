package netsetup

import (
	"errors"
	"fmt"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// TableRoutes counts the IPv4 routes of a policy-routing table (an ENI's);
// uninstall reports it before it flushes the table.
func TableRoutes(table int) (int, error) {
	routes, err := tableRoutes(table)
	return len(routes), err
}

func tableRoutes(table int) ([]netlink.Route, error) {
	if table <= 0 || table == mainTable || table == unix.RT_TABLE_LOCAL || table == unix.RT_TABLE_DEFAULT {
		return nil, fmt.Errorf("table %d is not an ENI table", table)
	}
	routes, err := netlinksafe.RouteListFiltered(unix.AF_INET, &netlink.Route{Table: table}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return nil, fmt.Errorf("list routes of table %d: %w", table, err)
	}
	return routes, nil
}

// FlushTable deletes every IPv4 route of an ENI's table. The main, local
// and default tables are refused: they are never ours to flush.
func FlushTable(table int) error {
	routes, err := tableRoutes(table)
	if err != nil {
		return err
	}
	var errs []error
	for i := range routes {
		if err := netlink.RouteDel(&routes[i]); err != nil && !isNotFound(err) && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, fmt.Errorf("delete route %s from table %d: %w", routes[i].Dst, table, err))
		}
	}
	return errors.Join(errs...)
}
